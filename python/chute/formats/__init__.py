"""The formats datasets already live in, read in place: TFRecord files, LMDB environments, Parquet files,
Hugging Face datasets (``save_to_disk`` directories of Arrow files, ``datasets.Dataset`` objects) and HDF5
files. Each is a native ``SpanSource`` (cpp/include/chute/io/span_source.h): after a one-time scan, samples
are copied by offset out of the file's own mapping, with no Python per sample and no copy of the dataset.
TFRecord and LMDB need nothing installed (their parsers are chute's own); Parquet and Arrow need pyarrow
(``chute[parquet]``), a Dataset object ``datasets``, HDF5 h5py (``chute[hdf5]``): they read the files'
metadata, and chute's own readers the rest.

``chute.open`` (and a path given to :class:`chute.Loader` or ``chute pack``) recognises them through
:func:`recognise`; docs/FORMATS.md lists the layouts and how to name features, columns and keys."""

from __future__ import annotations

import glob as _glob
import os

from chute.formats.arrow import ArrowDataset, is_save_to_disk
from chute.formats.hdf5 import HDF5Dataset, is_hdf5
from chute.formats.lmdb import LMDBDataset, is_lmdb
from chute.formats.parquet import ParquetDataset, parquet_files
from chute.formats.tfrecord import TFRecordDataset, tfrecord_files

__all__ = [
    "ArrowDataset",
    "HDF5Dataset",
    "LMDBDataset",
    "ParquetDataset",
    "TFRecordDataset",
    "is_hf_dataset",
    "names_a_format",
    "recognise",
]

_HDF5_NAMES = (".h5", ".hdf5", ".hdf", ".he5")


def _paths(path: str) -> list[str]:
    if any(c in path for c in "*?["):
        return sorted(p for p in _glob.glob(path) if os.path.isfile(p))
    return [path]


def is_hf_dataset(obj) -> bool:
    """Whether ``obj`` is a ``datasets.Dataset`` (without importing datasets)."""
    return any(c.__module__.startswith("datasets.") and c.__name__ == "Dataset" for c in type(obj).__mro__)


def _kind(path: str) -> str | None:
    """Which format ``path`` (a file, a directory or a glob) is in, by names and first bytes; None for none
    of these."""
    if is_lmdb(path):
        return "lmdb"
    if os.path.isdir(path) and is_save_to_disk(path) or (os.path.isfile(path) and path.endswith(".arrow")):
        return "arrow"
    if parquet_files(path):
        return "parquet"
    if os.path.isfile(path) and (path.endswith(_HDF5_NAMES) or is_hdf5(path)):
        return "hdf5"
    if tfrecord_files(_paths(path)):
        return "tfrecord"
    return None


def names_a_format(path: str | os.PathLike) -> bool:
    """Whether ``path`` (a file, a directory or a glob) is a dataset in one of these formats: what chute.open
    reads with :func:`recognise`. Looks at names and the first bytes of files, no more."""
    return _kind(os.fspath(path)) is not None


def recognise(path, *, cache_dir=None, verify: bool = True, **options):
    """The dataset ``path`` names (or a ``datasets.Dataset``) when it is in one of these formats, else None.
    ``options`` are the format's (``image_key``, ``label_key``; ``labels`` for LMDB); given for a path of no
    format here, or one the format does not take, they are an error naming the path."""
    given = sorted(k for k, v in options.items() if v is not None)
    options = {k: options[k] for k in given}
    if is_hf_dataset(path):
        _refuse_labels(options, "a Dataset's labels are a column: name it with label_key=")
        return ArrowDataset(path, **options)
    path = os.fspath(path)
    kind = _kind(path)
    if kind == "lmdb":
        return LMDBDataset(path, cache_dir=cache_dir, **options)
    if kind is not None:
        _refuse_labels(options, f"a {kind} dataset's labels are stored in it: name them with label_key=")
    if kind == "arrow":
        return ArrowDataset(path, **options)
    if kind == "parquet":
        return ParquetDataset(path, cache_dir=cache_dir, **options)
    if kind == "hdf5":
        return HDF5Dataset(path, **options)
    if kind == "tfrecord":
        return TFRecordDataset(tfrecord_files(_paths(path)), cache_dir=cache_dir, verify=verify, **options)
    if given:
        raise ValueError(
            f"{', '.join(given)} apply to the formats of chute.formats (TFRecord, LMDB, Parquet, Arrow, HDF5); "
            f"{path!r} is none of them (chute.open reads it as packed shards, tar shards or an image folder)"
        )
    return None


def _refuse_labels(options: dict, why: str) -> None:
    if "labels" in options:
        raise ValueError(f"labels= labels an LMDB's raw image records; {why}")
