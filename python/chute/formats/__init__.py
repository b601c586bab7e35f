"""The formats datasets already live in, read in place: TFRecord files and LMDB environments (Parquet,
Hugging Face and HDF5 next). Each is a native ``SpanSource`` (cpp/include/chute/io/span_source.h): after a
one-time scan, cached under :func:`chute.cache.resolve_cache_dir`, samples are copied by offset out of the
file's own mapping, with no Python per sample and no copy of the dataset. Nothing to install: the parsers
(TFRecord's framing and Example, LMDB's B+tree, pickles, Caffe's Datum) are chute's own.

``chute.open`` (and a path given to :class:`chute.Loader` or ``chute pack``) recognises them through
:func:`recognise`; docs/FORMATS.md lists the layouts and how to name features and keys."""

from __future__ import annotations

import glob as _glob
import os

from chute.formats.lmdb import LMDBDataset, is_lmdb
from chute.formats.tfrecord import TFRecordDataset, tfrecord_files

__all__ = ["LMDBDataset", "TFRecordDataset", "names_a_format", "recognise"]


def _paths(path: str) -> list[str]:
    if any(c in path for c in "*?["):
        return sorted(p for p in _glob.glob(path) if os.path.isfile(p))
    return [path]


def names_a_format(path: str | os.PathLike) -> bool:
    """Whether ``path`` (a file, a directory or a glob) is a TFRecord or LMDB dataset: what chute.open
    reads with :func:`recognise`. Looks at names and the first bytes of files, no more."""
    path = os.fspath(path)
    return is_lmdb(path) or bool(tfrecord_files(_paths(path)))


def recognise(path: str | os.PathLike, *, cache_dir=None, verify: bool = True, **options):
    """The dataset ``path`` names when it is a TFRecord or LMDB dataset, else None. ``options`` are the
    format's (``image_key``, ``label_key``, ``labels``); given for a path of no format here, they are an
    error naming the path."""
    path = os.fspath(path)
    given = sorted(k for k, v in options.items() if v is not None)
    options = {k: options[k] for k in given}
    if is_lmdb(path):
        return LMDBDataset(path, cache_dir=cache_dir, **options)
    files = tfrecord_files(_paths(path))
    if files:
        if "labels" in options:
            raise ValueError(
                "labels= labels an LMDB's raw image records; a TFRecord's labels are a feature of its records: "
                "name it with label_key="
            )
        return TFRecordDataset(files, cache_dir=cache_dir, verify=verify, **options)
    if given:
        raise ValueError(
            f"{', '.join(given)} apply to TFRecord and LMDB datasets; {path!r} is neither (chute.open reads it "
            "as packed shards, tar shards or an image folder)"
        )
    return None
