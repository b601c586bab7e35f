"""What Arrow and Parquet datasets share: the image and label columns, found from the schema (Hugging Face
``datasets`` features first) or named, and each image's place in a column's buffers, computed over whole
arrays (numpy), never per sample in Python. pyarrow is imported by the callers (an optional dependency)."""

from __future__ import annotations

import json

import numpy as np

_IMAGE_NAMES = ("image", "img", "jpg", "jpeg", "png", "webp", "image_bytes")
_LABEL_NAMES = ("label", "labels", "target", "targets", "class", "cls", "y")


def hf_features(schema) -> dict:
    """The Hugging Face features stored in a schema's metadata (``datasets`` writes them under
    ``huggingface``), as their JSON: ``{"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", ...}}``."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        return json.loads(raw).get("info", {}).get("features", {}) or {}
    except (ValueError, AttributeError):
        return {}


def _binary(t) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def image_leaf(t) -> str | None:
    """'' when a column of type ``t`` holds images as binary, 'bytes' when as the ``{"bytes", "path"}``
    structs of the Image feature, else None."""
    import pyarrow as pa

    if _binary(t):
        return ""
    if pa.types.is_struct(t) and t.get_field_index("bytes") >= 0 and _binary(t.field("bytes").type):
        return "bytes"
    return None


def _listing(schema) -> str:
    return ", ".join(f"{f.name} ({f.type})" for f in schema)


def pick_columns(schema, features: dict, image_key: str | None, label_key: str | None, what: str):
    """(image column, its leaf: '' or 'bytes', label column or None, class names) for a schema. Errors
    name ``what`` and list the columns."""
    import pyarrow as pa

    names = schema.names
    if image_key is not None:
        if image_key not in names or image_leaf(schema.field(image_key).type) is None:
            raise ValueError(
                f"{what}: no image column {image_key!r} (binary, or an Image feature's bytes/path struct) "
                f"(image_key); its columns: {_listing(schema)}"
            )
        image = image_key
    else:
        typed = [n for n in names if features.get(n, {}).get("_type") == "Image"]
        candidates = typed or [n for n in names if image_leaf(schema.field(n).type) is not None]
        named = [n for n in candidates if n.lower() in _IMAGE_NAMES]
        if len(candidates) == 1 or len(named) == 1:
            image = candidates[0] if len(candidates) == 1 else named[0]
        else:
            found = f"several ({', '.join(candidates)})" if candidates else "none"
            raise ValueError(
                f"{what}: which column holds the images? Image features or binary columns: {found}; its "
                f"columns: {_listing(schema)}. Name it with image_key="
            )
    if label_key is not None:
        if label_key not in names or not pa.types.is_integer(schema.field(label_key).type):
            raise ValueError(f"{what}: no integer column {label_key!r} (label_key); its columns: {_listing(schema)}")
        label = label_key
    else:
        integer = [n for n in names if pa.types.is_integer(schema.field(n).type)]
        typed = [n for n in integer if features.get(n, {}).get("_type") == "ClassLabel"]
        named = [n for n in integer if n.lower() in _LABEL_NAMES]
        label = (typed or named or [None])[0]
    classes = list(features.get(label, {}).get("names") or []) if label is not None else []
    return image, image_leaf(schema.field(image).type), label, classes


def labels_of(column) -> np.ndarray:
    """A label column (a ChunkedArray or Array of integers) as int64, a null as -1."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column is None:
        return None
    return np.asarray(pc.fill_null(column, -1).cast(pa.int64()).to_numpy(), dtype=np.int64)


def binary_spans(array, leaf: str):
    """For one Array of the image column: (its values buffer, each row's start in it and length as uint64,
    each row's null as bool). ``leaf`` is image_leaf's: the struct's ``bytes`` child is read (with the struct's
    offset and nulls applied)."""
    import pyarrow as pa

    if leaf:
        array = array.flatten()[array.type.get_field_index(leaf)]
    wide = pa.types.is_large_binary(array.type)
    buffers = array.buffers()
    n, first = len(array), array.offset
    if n == 0 or buffers[1] is None:
        return None, np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.ones(n, bool)
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)[first : first + n + 1]
    starts = offsets[:-1].astype(np.uint64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.uint64)
    null = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    lengths[null] = 0
    starts[null] = 0
    return buffers[2], starts, lengths, null


def null_reasons(null: np.ndarray, first_key: int, paths=None) -> list[tuple[int, str]]:
    """The bad samples of a column's null rows: (place, why); an Image feature's row that holds only a path
    (``paths``: the struct's path child, or None) says which."""
    out = []
    for place in np.flatnonzero(null).tolist():
        path = paths[place].as_py() if paths is not None else None
        why = (
            f"row {first_key + place} holds no image bytes, only a path ({path!r}): the image was not embedded"
            if path
            else f"row {first_key + place} has no image (null)"
        )
        out.append((place, why))
    return out
