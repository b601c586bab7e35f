"""LMDB environments of image records, read in place (no liblmdb needed: data.mdb's B+tree is walked by
chute's own reader, and each image is copied by offset from its mapping; cpp/include/chute/formats/)."""

from __future__ import annotations

import os
from collections.abc import Callable

from chute import _native, _validate
from chute.cache import resolve_cache_dir
from chute.formats.base import FormatDataset

_MAGIC = (0xBEEFC0DE).to_bytes(4, "little")


def _data_file(path: str) -> str:
    return os.path.join(path, "data.mdb") if os.path.isdir(path) else path


def is_lmdb(path: str) -> bool:
    """Whether ``path`` is an LMDB environment: a directory holding ``data.mdb``, or a data file (LMDB's
    meta page magic at byte 16)."""
    data = _data_file(path)
    try:
        with open(data, "rb") as f:
            return f.read(20)[16:20] == _MAGIC
    except OSError:
        return False


class LMDBDataset(FormatDataset):
    """An LMDB environment of image records (``path``: its directory, or its data file when it was written
    with ``subdir=False``), read in place.

    Layouts, detected from the first records: pickled ``(image_bytes, label)`` tuples or
    ``{"image": image_bytes, "label": label}`` dicts (other dict keys: ``image_key`` / ``label_key``),
    pickle protocols 2 to 5; Caffe ``Datum`` records (``convert_imageset --encoded``); or the image files'
    bytes. The order is the pickled key list in the ``__keys__`` record when there is one (the widely copied
    folder2lmdb scripts write it, with ``__len__``), else LMDB's key order. ``layout`` says which was found.

    ``labels`` replaces the records' labels (raw image records have none, and read as -1 without it): a
    callable taking a sample's key (bytes) and returning its label, called once per sample at open, or a
    label file: one ``<key> <label>`` line per sample (the key as UTF-8 text).

    The scan runs once (records, and each image's place inside its value: the reader never unpickles) and
    its index is cached under :func:`chute.cache.resolve_cache_dir` (``cache_dir=``), never beside the
    data. A record that does not hold the layout is a sample error (its read fails naming its key), like a
    corrupt image."""

    kind = "LMDB"

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        image_key: str | None = None,
        label_key: str | None = None,
        labels: Callable[[bytes], int] | str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        self.path = os.fsdecode(_validate.path("path", path))
        for name, value in (("image_key", image_key), ("label_key", label_key)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a dict key (str), got {value!r}")
        self._native, self.layout, self.keys_record, self.data_file = _native.open_lmdb(
            self.path,
            image_key=image_key or "image",
            label_key=label_key or "label",
            cache_dir=resolve_cache_dir(cache_dir),
        )
        if labels is not None:
            self._native = self._native.with_labels(self._labels_from(labels))
        self.classes: list[str] = []

    def keys(self) -> list[bytes]:
        """Each sample's LMDB key, in order."""
        return [self._native.key(i) for i in range(len(self))]

    def _labels_from(self, labels) -> list[int]:
        keys = self.keys()
        if callable(labels):
            out = []
            for key in keys:
                label = labels(key)
                if isinstance(label, bool) or not isinstance(label, int):
                    raise TypeError(f"labels({key!r}) returned {label!r}, not an int")
                out.append(label)
            return out
        table: dict[bytes, int] = {}
        label_file = os.fspath(labels)
        with open(label_file, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                key, _, value = line.rstrip("\n").rpartition(" ")
                try:
                    table[key.encode()] = int(value)
                except ValueError:
                    raise ValueError(f"{label_file}:{n}: not '<key> <label>': {line.rstrip()!r}") from None
        missing = [k for k in keys if k not in table]
        if missing:
            raise ValueError(f"{label_file} has no label for {len(missing)} keys, such as {missing[0]!r}")
        return [table[k] for k in keys]

    def __repr__(self) -> str:
        return f"chute.LMDBDataset({self.path!r}, samples={len(self)}, layout={self.layout!r})"
