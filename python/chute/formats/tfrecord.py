"""TFRecord files of ``tf.train.Example`` records, read in place (no TensorFlow): the framing with its
masked CRC-32C checked on every read, each Example parsed natively (cpp/include/chute/formats/)."""

from __future__ import annotations

import os
import re

from chute import _native, _validate
from chute.cache import resolve_cache_dir
from chute.formats.base import FormatDataset

# What a TFRecord file is called: TFDS ("x.tfrecord-00000-of-01024"), TF's examples (".tfrecord",
# ".tfrecords", ".tfrec"); the model garden's ImageNet shards ("train-00000-of-01024") have no extension and
# are recognised by their first record's header.
_NAMED = re.compile(r"\.(tfrecords?|tfrec)(-\d+-of-\d+)?(\.gz)?$")


def _is_tfrecord(path: str) -> bool:
    if _NAMED.search(path):
        return True
    if path.endswith((".tar", ".chidx", ".mdb", ".txt", ".json")) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return _native.is_tfrecord_header(f.read(12))
    except OSError:
        return False


def tfrecord_files(paths: list[str]) -> list[str]:
    """``paths`` when they are TFRecord files (by name, or by their first record's header), else []. A
    directory stands for the TFRecord files in it, sorted."""
    if len(paths) == 1 and os.path.isdir(paths[0]):
        directory = paths[0]
        paths = sorted(os.path.join(directory, f) for f in os.listdir(directory))
        paths = [p for p in paths if os.path.isfile(p) and not os.path.basename(p).startswith(".")]
        # A directory of TFRecord files only (a TFDS directory holds two splits and metadata: name a glob).
        return paths if paths and all(_is_tfrecord(p) for p in paths) else []
    return paths if paths and all(_is_tfrecord(p) for p in paths) else []


class TFRecordDataset(FormatDataset):
    """TFRecord files of ``tf.train.Example`` records (each file one shard, samples numbered in the order of
    ``paths``), read in place.

    The image is the first value of a bytes feature, the label the first value of an int64 feature:
    ``image_key`` / ``label_key``, else detected from the first record: ``image/encoded`` then ``image``,
    ``image/class/label`` then ``label`` (the ImageNet scripts of TF's model garden, and TFDS). Labels are
    returned as stored: the model garden's start from 1 (subtract 1 in your loss or with
    ``target_transform``). A record without the label feature is labelled -1. ``features`` lists the first
    record's features.

    Each file is scanned once (its records' offsets and labels, like DALI's ``tfrecord2idx``), and the index
    cached under :func:`chute.cache.resolve_cache_dir` (``cache_dir=``), never beside the data. Every read
    checks the record's CRC-32C unless ``verify=False``. GZIP-compressed files are refused with what to do
    (a compressed stream cannot be read by offset)."""

    kind = "TFRecord"

    def __init__(
        self,
        paths,
        *,
        image_key: str | None = None,
        label_key: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        verify: bool = True,
    ):
        if isinstance(paths, (str, bytes, os.PathLike)):
            paths = [paths]
        self.paths = [os.fsdecode(_validate.path("paths", p)) for p in paths]
        for name, value in (("image_key", image_key), ("label_key", label_key)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a feature name (str), got {value!r}")
        self._native, self.image_key, label, features = _native.open_tfrecord(
            self.paths,
            image_key=image_key or "",
            label_key=label_key or "",
            cache_dir=resolve_cache_dir(cache_dir),
            verify=bool(verify),
        )
        self.label_key: str | None = label or None
        self.features: list[tuple[str, str]] = [tuple(f) for f in features]
        self.classes: list[str] = []

    def __repr__(self) -> str:
        return (
            f"chute.TFRecordDataset({len(self.paths)} files, samples={len(self)}, image_key={self.image_key!r}, "
            f"label_key={self.label_key!r})"
        )
