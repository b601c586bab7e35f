"""Arrow IPC files as Hugging Face ``datasets`` writes them (``save_to_disk``: ``data-0000x-of-0000N.arrow``
beside ``dataset_info.json`` and ``state.json``), and ``datasets.Dataset`` objects, read in place: pyarrow
maps the file once to find each image column's value buffer and offsets, and chute reads every image by
offset from its own mapping of the file (or, for a Dataset object, from the memory its table lies in)."""

from __future__ import annotations

import json
import os

import numpy as np

from chute import _native, _validate
from chute.formats.arrow_columns import binary_spans, hf_features, labels_of, null_reasons, pick_columns
from chute.formats.base import FormatDataset, check_keys, require


def is_save_to_disk(path: str) -> bool:
    """Whether ``path`` is a directory that ``Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``) wrote."""
    return os.path.isfile(os.path.join(path, "state.json")) or os.path.isfile(os.path.join(path, "dataset_dict.json"))


def arrow_files(path: str) -> list[str]:
    """The Arrow files of a save_to_disk directory, in its state.json's order; [path] for a .arrow file."""
    if os.path.isfile(path):
        return [path]
    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        with open(os.path.join(path, "dataset_dict.json")) as f:
            splits = json.load(f).get("splits", [])
        raise ValueError(
            f"{path!r} holds a DatasetDict of splits ({', '.join(splits)}): open one, such as "
            f"chute.open({os.path.join(path, splits[0] if splits else 'train')!r})"
        )
    with open(os.path.join(path, "state.json")) as f:
        state = json.load(f)
    return [os.path.join(path, d["filename"]) for d in state.get("_data_files", [])]


def _features_of(path: str) -> dict:
    info = os.path.join(os.path.dirname(path), "dataset_info.json")
    try:
        with open(info) as f:
            return json.load(f).get("features") or {}
    except (OSError, ValueError):
        return {}


def _file_table(path: str, image_key, label_key):
    """One Arrow IPC file (stream or file format) as a span table over the file, its batches' sizes, and
    what pick_columns found."""
    pa = require("pyarrow", "parquet", "Arrow files")
    with pa.memory_map(path) as mapped:
        size = mapped.size()
        base = mapped.read_buffer(size).address
        mapped.seek(0)
        head = mapped.read_buffer(6).to_pybytes()
        mapped.seek(0)
        try:
            reader = pa.ipc.open_file(mapped) if head == b"ARROW1" else pa.ipc.open_stream(mapped)
            batches = (
                [reader.get_batch(i) for i in range(reader.num_record_batches)] if head == b"ARROW1" else list(reader)
            )
            for batch in batches:  # pyarrow trusts the file's offsets until asked: a damaged file fails here
                batch.validate(full=True)
        except (pa.ArrowException, OSError) as e:
            raise ValueError(f"{path}: not an Arrow IPC file that pyarrow can read ({e})") from None
        schema = reader.schema
        features = _features_of(path) or hf_features(schema)
        image, leaf, label, classes = pick_columns(schema, features, image_key, label_key, path)
        starts, lengths, labels, bad, sizes = [], [], [], [], []
        row = 0
        for batch in batches:
            column = batch.column(schema.get_field_index(image))
            values, start, length, null = binary_spans(column, leaf)
            if values is not None and len(start):
                at = values.address - base
                if not 0 <= at <= size - values.size:  # a compressed IPC file: decoded into memory, not mapped
                    raise ValueError(
                        f"{path}: the {image!r} column's buffers are compressed (IPC compression): they cannot "
                        "be read by offset. Write the file uncompressed (datasets never compresses)"
                    )
                start = start + np.uint64(at)
            paths = column.flatten()[column.type.get_field_index("path")] if leaf else None
            bad += [(row + p, why) for p, why in null_reasons(null, row, paths)]
            starts.append(start)
            lengths.append(length)
            labels.append(
                labels_of(batch.column(schema.get_field_index(label))) if label else np.full(len(batch), -1, np.int64)
            )
            sizes.append(len(batch))
            row += len(batch)
    table = {
        "path": path,
        "name": path,
        "offsets": np.concatenate(starts) if starts else np.zeros(0, np.uint64),
        "lengths": np.concatenate(lengths) if lengths else np.zeros(0, np.uint64),
        "labels": np.concatenate(labels) if labels else np.zeros(0, np.int64),
        "first_key": 0,
        "bad": bad,
    }
    return table, [s for s in sizes if s], (image, label, classes)


class ArrowDataset(FormatDataset):
    """A Hugging Face dataset in Arrow form, read in place: a ``save_to_disk`` directory (its Arrow IPC files
    in ``state.json``'s order; a ``DatasetDict``'s directory names its splits), a ``.arrow`` file, or a
    ``datasets.Dataset`` object.

    The image column holds the ``{"bytes", "path"}`` structs of the ``Image`` feature, or plain binary; the
    label column is a ``ClassLabel`` (its names become ``classes``) or integers: both detected from the
    features (``dataset_info.json``, or the schema's ``huggingface`` metadata) and the column types, or named
    with ``image_key`` / ``label_key``. Without a label column, labels are -1.

    Files are memory-mapped once by pyarrow to find each image's offset; chute then reads every image from its
    own mapping of the file: no Python per sample, no copy. A Dataset object is read from the memory its
    table lies in (its cache files' mapping, or memory), kept alive by this dataset, in its order
    (``select``, ``shuffle``, ``filter`` and ``train_test_split`` are honoured). Each record batch is a shard
    for ``order='shards'``. A null image (or one stored only as a path) is a sample error naming its row."""

    kind = "Arrow"

    def __init__(self, source, *, image_key: str | None = None, label_key: str | None = None):
        check_keys("a column name", image_key, label_key)
        if hasattr(source, "data") and hasattr(source, "features") and hasattr(source, "_indices"):
            self.path = None
            self._open_dataset(source, image_key, label_key)
            return
        self.path = os.fsdecode(_validate.path("source", source))
        files = arrow_files(self.path)
        if not files:
            raise ValueError(f"{self.path!r}: its state.json lists no Arrow files")
        tables, sizes, found = [], [], None
        for f in files:
            table, batches, columns = _file_table(f, image_key, label_key)
            if found is not None and columns[:2] != found[:2]:
                raise ValueError(f"{f}: its columns {columns[:2]} differ from {files[0]}'s {found[:2]}")
            found = found or columns
            tables.append(table)
            sizes += batches
        self.image_key, self.label_key, self.classes = found
        self.paths = files
        self._native = _native.open_span_table(tables, shard_sizes=sizes)

    def _open_dataset(self, ds, image_key, label_key) -> None:
        table = ds.data.table
        features = {
            name: feature.to_dict() if hasattr(feature, "to_dict") else {} for name, feature in ds.features.items()
        }
        features = hf_features(table.schema) or {k: v for k, v in features.items() if v}
        image, leaf, label, classes = pick_columns(table.schema, features, image_key, label_key, "the Dataset")
        self.image_key, self.label_key, self.classes = image, label, classes
        self.paths = [f["filename"] for f in ds.cache_files]
        tables, row = [], 0
        labels = labels_of(table.column(label)) if label else np.full(table.num_rows, -1, np.int64)
        for n, chunk in enumerate(c for c in table.column(image).chunks if len(c)):
            values, start, length, null = binary_spans(chunk, leaf)
            paths = chunk.flatten()[chunk.type.get_field_index("path")] if leaf else None
            tables.append(
                {
                    "buffer": values if values is not None else b"",
                    "name": f"datasets.Dataset[batch {n}]",
                    "offsets": start,
                    "lengths": length,
                    "labels": labels[row : row + len(chunk)],
                    "first_key": row,
                    "bad": null_reasons(null, row, paths),
                }
            )
            row += len(chunk)
        if not tables:
            raise ValueError("the Dataset has no rows")
        order = None
        if ds._indices is not None:
            order = np.asarray(ds._indices.column(0).to_numpy(), dtype=np.int64)
        self._native = _native.open_span_table(tables, shard_sizes=[], order=order)

    def files(self) -> list[dict]:
        if self.path is None:
            return [{"file": p, "records": None, "bytes": os.path.getsize(p), "index": None} for p in self.paths]
        return super().files()

    def __repr__(self) -> str:
        where = repr(self.path) if self.path is not None else "a datasets.Dataset"
        return (
            f"chute.ArrowDataset({where}, samples={len(self)}, image_key={self.image_key!r}, "
            f"label_key={self.label_key!r})"
        )
