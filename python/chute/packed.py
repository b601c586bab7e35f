"""Packed datasets: ``chute.pack`` writes chute's shard format (docs/FORMAT.md), ``chute.open`` reads it,
and plain tar / WebDataset shards too. The work is native (reading, hashing and writing run in C++ threads,
without the GIL); this module resolves paths and options."""

from __future__ import annotations

import glob as _glob
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from chute import _native
from chute.sources import ImageFolder, NativeSource

INDEX_FILE = "index.chidx"
FORMAT_VERSION = _native.FORMAT_VERSION
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str | int) -> int:
    """``"1GB"`` -> 10**9, ``"512MiB"`` -> 512 * 2**20, ``"4096"`` -> 4096 (decimal units, binary with ``i``)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 1GB, 512MB, 256MiB, 100000)")
    unit = (match.group(2) or "").lower().rstrip("b")
    return int(float(match.group(1)) * _UNITS[unit])


class FileList(NativeSource):
    """Samples listed in a text file, one ``<path> <label>`` per line; relative paths are relative to the
    list file's directory. Usable by :class:`chute.Loader` and :func:`chute.pack`."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._native = _native.FileList.open(self.path)
        self.classes: list[str] = []

    def __repr__(self) -> str:
        return f"chute.FileList({self.path!r}, samples={len(self)})"


class _RecordSource(NativeSource):
    """A source whose records can be read back as they were stored: ``dataset[i]`` is ``(bytes, label)``."""

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        """The sample's encoded bytes (exactly as stored) and its label."""
        return _native.read_sample(self._native, index), self._native.label(index)


class PackedDataset(_RecordSource):
    """A dataset written by :func:`chute.pack`: same samples, labels, classes and order as its source.
    Reads go through one memory mapping per shard; each record's XXH3 checksum is checked on every read
    unless ``verify=False``."""

    def __init__(self, path: str | os.PathLike, *, verify: bool = True):
        self.path = os.fspath(path)
        self._native = _native.PackedSource.open(self.path, verify)
        self.classes: list[str] = list(self._native.classes)
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}

    def __repr__(self) -> str:
        return f"chute.PackedDataset({self.path!r}, samples={len(self)}, classes={len(self.classes)})"


class TarDataset(_RecordSource):
    """Plain tar or WebDataset shards, read in place. Files sharing a basename are one sample; the image is
    its jpg/jpeg/png/... member and the label the integer in its ``.cls`` member (-1 without one). A plain
    tar of an ImageFolder tree (no ``.cls`` anywhere) is labelled by class directory, as ImageFolder does.
    Each tar's index is built on first open and kept beside it as ``<tar>.chidx``."""

    def __init__(self, paths: list[str], *, write_index: bool = True):
        self.paths = list(paths)
        self._native = _native.TarSource.open(self.paths, write_index)
        self.classes: list[str] = list(self._native.classes)

    def __repr__(self) -> str:
        return f"chute.TarDataset({len(self.paths)} tar files, samples={len(self)})"


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _tar_paths(path: str) -> list[str] | None:
    """The tar files ``path`` names (a glob, a .tar file, or a directory of them), or None."""
    if _is_glob(path):
        matches = sorted(p for p in _glob.glob(path) if os.path.isfile(p) and not p.endswith(".chidx"))
        if not matches:
            raise FileNotFoundError(f"no file matches {path!r}")
        return matches
    if os.path.isfile(path) and path.endswith(".tar"):
        return [path]
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, INDEX_FILE)):
        tars = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".tar"))
        return tars or None
    return None


def open(path_or_glob: str | os.PathLike, *, verify: bool = True) -> PackedDataset | TarDataset:  # noqa: A001
    """Opens a packed dataset (its directory, or its ``index.chidx``), or tar / WebDataset shards (a
    ``.tar`` file, a glob such as ``"shards/train-*.tar"``, or a directory of tars). The result works
    with :class:`chute.Loader` like :class:`chute.ImageFolder`."""
    path = os.fspath(path_or_glob)
    tars = _tar_paths(path)
    if tars is not None:
        return TarDataset(tars)
    return PackedDataset(path, verify=verify)


def source_from_path(path: str | os.PathLike) -> ImageFolder | PackedDataset | TarDataset:
    """What a path given to :class:`chute.Loader` means: a packed dataset (a directory holding
    ``index.chidx``), tar shards (a .tar, a glob, or a directory of tars), else an ImageFolder tree."""
    path = os.fspath(path)
    if _is_glob(path) or path.endswith((".tar", ".chidx")) or os.path.exists(os.path.join(path, INDEX_FILE)):
        return open(path)
    if os.path.isdir(path) and _tar_paths(path) is not None:
        return open(path)
    return ImageFolder(path)


def index(path_or_glob: str | os.PathLike) -> list[str]:
    """Builds the index of each tar file (``<tar>.chidx``) ahead of the first open; returns the tars."""
    tars = _tar_paths(os.fspath(path_or_glob))
    if tars is None:
        raise ValueError(f"{os.fspath(path_or_glob)!r} names no tar file")
    _native.write_tar_indexes(tars)
    return tars


def _source_for(src) -> tuple[object, list[str]]:
    """The native source and class names to pack from: a chute source object, an ImageFolder directory, a
    packed dataset, tar shards, or a file list."""
    if hasattr(src, "_native") and isinstance(src._native, _native.Source):
        return src._native, list(getattr(src, "classes", []))
    path = os.fspath(src)
    tars = _tar_paths(path)
    if tars is not None:
        tar = _native.TarSource.open(tars, True)
        return tar, list(tar.classes)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, INDEX_FILE)):
            packed = PackedDataset(path)
            return packed._native, packed.classes
        folder = ImageFolder(path)
        return folder._native, folder.classes
    if os.path.isfile(path):
        return _native.FileList.open(path), []
    raise FileNotFoundError(f"no such file or directory: {path!r}")


@dataclass
class PackSummary:
    samples: int
    payload_bytes: int
    file_bytes: int
    shards: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.seconds if self.seconds else float("nan")

    @property
    def img_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds else float("nan")


def pack(src, dst: str | os.PathLike, *, shard_size: str | int = "1GB", num_threads: int | None = None,
         part: int | None = None, parts: int | None = None,
         progress: Callable[[int, int, int], None] | None = None, max_file_bytes: int = 1 << 30) -> PackSummary:
    """Writes ``src`` (an ImageFolder directory or object, a file list, tar / WebDataset shards, or a
    packed dataset) to ``dst`` as packed shards of about ``shard_size`` bytes, in the source's order.

    Files are written under temporary names and renamed into place at the end, the index last: an
    interrupted pack leaves nothing that opens as a dataset. With ``part=i, parts=n`` this call writes only
    the i-th of n disjoint, contiguous slices of the samples (run one per machine or process), and
    :func:`merge` writes the index once all n are done. ``progress(samples, bytes, total)`` is called about
    every 100 ms; an exception from it (or Ctrl-C) cancels the pack and removes its files. A sample file
    larger than ``max_file_bytes`` stops the pack with an error naming it. Every failure removes the
    pack's temporary files; running out of memory, descriptors or threads raises
    :class:`chute.ResourceError` naming the limit.
    """
    import time

    if (part is None) != (parts is None):
        raise ValueError("give both part and parts, or neither")
    part, parts = (0, 1) if parts is None else (int(part), int(parts))
    if parts < 1 or not 0 <= part < parts:
        raise ValueError(f"part must be in [0, parts), got part={part}, parts={parts}")
    if num_threads is not None and num_threads <= 0:
        raise ValueError(f"num_threads must be positive, got {num_threads}")
    if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or not 0 < max_file_bytes < 2**64:
        raise ValueError(f"max_file_bytes must be a positive int (bytes), got {max_file_bytes!r}")
    source, classes = _source_for(src)
    start = time.perf_counter()
    result = _native.pack(source, classes, os.fspath(dst), parse_size(shard_size), num_threads or 0, part, parts,
                          progress, max_file_bytes=max_file_bytes)
    return PackSummary(result["samples"], result["payload_bytes"], result["file_bytes"], result["shards"],
                       time.perf_counter() - start)


def merge(dst: str | os.PathLike) -> PackSummary:
    """Writes ``dst``'s index from the part indexes that ``pack(..., part=i, parts=n)`` left there."""
    import time

    start = time.perf_counter()
    r = _native.merge_parts(os.fspath(dst))
    return PackSummary(r["samples"], r["payload_bytes"], r["file_bytes"], r["shards"], time.perf_counter() - start)


def verify(dataset: PackedDataset, *, num_threads: int | None = None,
           progress: Callable[[int], None] | None = None) -> list[tuple[int, str]]:
    """Checks every record of a packed dataset (bounds, header against index, XXH3 checksum) on
    ``num_threads`` threads. Returns ``(index, error)`` for each bad record, in order; the error names
    the shard file and record."""
    n = len(dataset)
    chunk = 4096
    ranges = [(b, min(b + chunk, n)) for b in range(0, n, chunk)]
    bad: list[tuple[int, str]] = []
    with ThreadPoolExecutor(num_threads or len(os.sched_getaffinity(0))) as pool:
        for (b, e), found in zip(ranges, pool.map(lambda r: dataset._native.verify(*r), ranges)):
            bad.extend(found)
            if progress is not None:
                progress(e - b)
    return bad


def describe(dataset: PackedDataset | TarDataset) -> dict:
    """What ``chute inspect`` prints: samples, classes, shards, bytes, format version and the size
    distribution of the encoded images."""
    import numpy as np

    sizes = np.asarray(dataset._native.payload_sizes(), dtype=np.int64)
    labels = np.asarray(dataset._native.labels(), dtype=np.int64)
    if isinstance(dataset, PackedDataset):
        directory = dataset._native.directory
        shards = [{"file": name, "records": records, "bytes": size}
                  for name, records, size, _ in dataset._native.shards()]
        index_bytes = os.path.getsize(os.path.join(directory, INDEX_FILE))
        kind, version = "chute packed shards", FORMAT_VERSION
    else:
        shards = [{"file": p, "records": None, "bytes": os.path.getsize(p)} for p in dataset._native.tar_paths()]
        index_bytes = sum(os.path.getsize(p + ".chidx") for p in dataset.paths if os.path.exists(p + ".chidx"))
        kind, version = "tar / WebDataset", None
    percentiles = (0, 10, 50, 90, 99, 100)
    values = np.percentile(sizes, percentiles).round().astype(int).tolist() if len(sizes) else [0] * len(percentiles)
    labelled = labels[labels >= 0]
    return {
        "path": getattr(dataset, "path", None) or dataset.paths,
        "kind": kind,
        "format_version": version,
        "samples": int(len(sizes)),
        "classes": len(dataset.classes) if dataset.classes else int(len(np.unique(labelled))),
        "unlabelled": int((labels < 0).sum()),
        "shards": shards,
        "bytes": int(sum(s["bytes"] for s in shards) + index_bytes),
        "payload_bytes": int(sizes.sum()),
        "image_bytes": {"mean": float(sizes.mean()) if len(sizes) else 0.0,
                        **{("min" if p == 0 else "max" if p == 100 else f"p{p}"): v
                           for p, v in zip(percentiles, values)}},
    }
