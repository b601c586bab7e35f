"""Packed datasets: ``chute.pack`` writes chute's shard format (docs/FORMAT.md), ``chute.open`` reads it,
and plain tar / WebDataset shards too. The work is native (reading, hashing and writing run in C++ threads,
without the GIL); this module resolves paths and options."""

from __future__ import annotations

import builtins
import glob as _glob
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from chute import _native, _validate
from chute._validate import parse_size
from chute.cache import resolve_cache_dir
from chute.sources import ImageFolder, NativeSource, RecordSource

INDEX_FILE = "index.chidx"
FORMAT_VERSION = _native.FORMAT_VERSION


class FileList(NativeSource):
    """Samples listed in a text file, one ``<path> <label>`` per line; relative paths are relative to the
    list file's directory. Usable by :class:`chute.Loader` and :func:`chute.pack`."""

    def __init__(self, path: str | os.PathLike):
        self.path = _validate.path("path", path)
        self._native = _native.FileList.open(self.path)
        self.classes: list[str] = []

    def __repr__(self) -> str:
        return f"chute.FileList({self.path!r}, samples={len(self)})"


class PackedDataset(RecordSource):
    """A dataset written by :func:`chute.pack`: same samples, labels, classes and order as its source.
    Reads go through one memory mapping per shard; each record's XXH3 checksum is checked on every read
    unless ``verify=False``.

    ``path`` may be a URL (``s3://bucket/train/``, ``gs://...``, ``https://host/train/``): the index is
    fetched at open, and shards are fetched whole, ahead of the loader's order, into the node's shard cache
    (``cache_dir``, ``cache_limit``; docs/REMOTE.md), then read like local ones. Use ``order="shards"`` in
    :class:`chute.Loader` so that readers move through a few shards at a time."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        verify: bool = True,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
    ):
        from chute import remote

        self.path = remote.local_path(path) if isinstance(path, str) else _validate.path("path", path)
        if remote.is_url(self.path):
            self._native = _native.PackedSource.open_remote(
                self.path, remote.store(), remote.cache(cache_dir, cache_limit), bool(verify)
            )
        else:
            self.path = _validate.path("path", self.path)
            self._native = _native.PackedSource.open(self.path, bool(verify))
        self.classes: list[str] = list(self._native.classes)
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}

    def remote_stats(self) -> dict | None:
        """For a remote dataset, its I/O so far: shards fetched and served by the cache, reads that waited
        for a shard (and how long), and the process's HTTP figures (requests, bytes, retries, in flight,
        latency p50/p99); None for a local one."""
        shards = self._native.remote_stats()
        if shards is None:
            return None
        from chute import remote

        return {**shards, **remote.stats()}

    def __repr__(self) -> str:
        from chute import remote

        # A URL's user:password@ never shows (a Loader's repr, a log line, a traceback print this).
        path = _native.redact_url(self.path) if remote.is_url(self.path) else self.path
        return f"chute.PackedDataset({path!r}, samples={len(self)}, classes={len(self.classes)})"


class TarDataset(RecordSource):
    """Plain tar or WebDataset shards, read in place.

    WebDataset shards (members sharing a key with an image: ``.cls``, ``.json``...) are grouped by
    WebDataset's rule: the key is the path up to the first dot of the file name, and consecutive members
    with one key are a sample; its image is the jpg/jpeg/png/... member and its label the integer in its
    ``.cls`` member (-1 without one). A tar of an image tree (no such companion) has one sample per image
    file, as :class:`chute.ImageFolder` lists the tree, and is labelled by class directory when no tar has
    a ``.cls``. Hard and symbolic links inside the archive read their target's bytes. Members left out
    are listed, by reason, in :attr:`skipped` (and by ``chute inspect``).

    Each tar's index is built on first open and cached in :func:`resolve_cache_dir` (``cache_dir=`` overrides
    it), never beside the tar unless ``chute index`` wrote it there; an index is reused only while the
    tar's name, size, mtime, inode, ctime and content fingerprint match."""

    def __init__(self, paths: list[str], *, cache_dir: str | os.PathLike | None = None):
        if isinstance(paths, (str, bytes, os.PathLike)):
            paths = [paths]  # one tar file, not a list of its name's characters
        self.paths = [os.fsdecode(_validate.path("paths", p)) for p in paths]
        self._native = _native.TarSource.open(self.paths, resolve_cache_dir(cache_dir))
        self.classes: list[str] = list(self._native.classes)

    @classmethod
    def from_urls(
        cls, pattern: str, *, cache_dir: str | os.PathLike | None = None, cache_limit: int | str | None = None
    ) -> TarDataset:
        """Tar shards in object storage (a URL with braces or globs). A tar's members are known only by
        reading it, so each tar is fetched whole into the shard cache at open (many at once), indexed there,
        and read locally; chute's packed format, whose index lists every record, fetches shards only as the
        loader's order reaches them."""
        from chute import remote

        urls = remote.expand(pattern)
        paths = _native.cache_objects(remote.store(), remote.cache(cache_dir, cache_limit), urls)
        dataset = cls(paths, cache_dir=cache_dir)
        dataset.urls = urls
        return dataset

    @property
    def skipped(self) -> list[dict]:
        """Members of the tars that are in no sample: ``{"reason", "count", "examples"}`` per reason
        (examples are ``"<tar>:<member>"``, at most 5 per tar)."""
        return [{"reason": r, "count": n, "examples": list(e)} for r, n, e in self._native.skipped()]

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
        tars = sorted(
            p for p in (os.path.join(path, f) for f in os.listdir(path) if f.endswith(".tar")) if os.path.isfile(p)
        )  # a class folder may be named "x.tar"
        return tars or None
    return None


def open(
    path_or_glob: str | os.PathLike,
    *,
    verify: bool = True,  # noqa: A001
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    image_key: str | None = None,
    label_key: str | None = None,
    labels=None,
) -> PackedDataset | TarDataset:
    """Opens a packed dataset (its directory, or its ``index.chidx``), or tar / WebDataset shards (a
    ``.tar`` file, a glob such as ``"shards/train-*.tar"``, or a directory of tars), or a dataset in a
    format it already lives in (:mod:`chute.formats`: TFRecord files, an LMDB environment; ``image_key``,
    ``label_key`` and ``labels`` where detection needs help, docs/FORMATS.md). The result works with
    :class:`chute.Loader` like :class:`chute.ImageFolder`.

    URLs work too: ``s3://bucket/train/`` or ``https://host/data/train/`` (a packed dataset's prefix),
    ``https://host/data/train-{0000..0127}.tar`` or ``s3://bucket/shards/*.tar`` (tar shards: braces,
    and globs listed for s3:// and gs://), ``file:///data/train``. ``cache_dir``: where tar indexes and
    remote shards are cached (default :func:`resolve_cache_dir`); ``cache_limit``: the shard cache's size
    (default 50 GB; least recently used shards are evicted). docs/REMOTE.md."""
    from chute import remote

    if isinstance(path_or_glob, str) and path_or_glob.startswith("file://"):
        path_or_glob = remote.local_path(path_or_glob)
    if remote.is_url(path_or_glob):
        if _names_tars(path_or_glob):
            return TarDataset.from_urls(path_or_glob, cache_dir=cache_dir, cache_limit=cache_limit)
        return PackedDataset(path_or_glob, verify=verify, cache_dir=cache_dir, cache_limit=cache_limit)
    path = os.fsdecode(_validate.path("path_or_glob", path_or_glob))
    from chute import formats

    found = formats.recognise(
        path, cache_dir=cache_dir, verify=verify, image_key=image_key, label_key=label_key, labels=labels
    )
    if found is not None:
        return found
    tars = _tar_paths(path)
    if tars is not None:
        return TarDataset(tars, cache_dir=cache_dir)
    return PackedDataset(path, verify=verify)


def _names_tars(url: str) -> bool:
    """Whether a URL (or URL pattern) names tar files rather than a packed dataset's prefix."""
    last = url.rstrip("/").rsplit("/", 1)[-1]
    return not url.endswith("/") and (last.endswith(".tar") or ".tar}" in last or ".tar," in last)


def _image_tree_below(directory: str) -> str | None:
    """A subdirectory of ``directory`` with an image file somewhere below it (links followed, each
    directory once), or None: what makes ``directory`` readable as an ImageFolder root."""
    extensions = tuple(_native.IMAGE_EXTENSIONS)
    seen: set[tuple[int, int]] = set()

    def holds_image(d: str) -> bool:
        try:
            st = os.stat(d)
            if (st.st_dev, st.st_ino) in seen:
                return False
            seen.add((st.st_dev, st.st_ino))
            entries = list(os.scandir(d))
        except OSError:
            return False
        if any(e.name.lower().endswith(extensions) and not e.is_dir() for e in entries):
            return True
        return any(holds_image(e.path) for e in entries if e.is_dir())

    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir() and holds_image(entry.path):
            return entry.name
    return None


def source_from_path(path: str | os.PathLike) -> ImageFolder | PackedDataset | TarDataset:
    """What a path given to :class:`chute.Loader` means: a packed dataset (a directory holding
    ``index.chidx``), tar shards (a .tar, a glob, or a directory of tars), else an ImageFolder tree.

    A directory that reads both ways (tar files beside class folders of images) is an error naming both
    readings: chute never guesses which one the user meant."""
    from chute import remote

    if remote.is_url(path) or (isinstance(path, str) and path.startswith("file://")):
        return open(path)
    path = os.fspath(path)
    from chute import formats

    if _is_glob(path) or path.endswith((".tar", ".chidx")) or os.path.exists(os.path.join(path, INDEX_FILE)):
        return open(path)
    if formats.names_a_format(path):  # TFRecord files, an LMDB environment
        return open(path)
    if os.path.isdir(path):
        tars = _tar_paths(path)
        if tars is not None:
            tree = _image_tree_below(path)
            if tree is not None:
                names = ", ".join(os.path.basename(t) for t in tars[:3]) + (", ..." if len(tars) > 3 else "")
                raise ValueError(
                    f"{path!r} is ambiguous: it holds {len(tars)} tar file(s) ({names}), readable as tar / "
                    f"WebDataset shards, and class folders of images (such as {tree!r}), readable as an "
                    f"ImageFolder. Say which: chute.ImageFolder({path!r}) for the image folders, or "
                    f"chute.open({path!r}) (or chute.open({os.path.join(path, '*.tar')!r})) for the tars."
                )
            return open(path)
    return ImageFolder(path)


def index(path_or_glob: str | os.PathLike) -> list[str]:
    """Builds the index of each tar file ahead of the first open, beside it as ``<tar>.chidx`` (the one
    case where chute writes into a dataset's directory: asked for here); returns the tars."""
    path = os.fsdecode(_validate.path("path_or_glob", path_or_glob))
    tars = _tar_paths(path)
    if tars is None:
        raise ValueError(f"{path!r} names no tar file")
    _native.write_tar_indexes(tars)
    return tars


def _source_for(src) -> tuple[object, list[str]]:
    """The native source and class names to pack from: a chute source object, an ImageFolder directory, a
    packed dataset, tar shards, or a file list."""
    if hasattr(src, "_native") and isinstance(src._native, _native.Source):
        return src._native, list(getattr(src, "classes", []))
    path = os.fsdecode(_validate.path("src", src))
    from chute import formats

    if _is_glob(path) or os.path.isdir(path) or path.endswith((".tar", ".chidx")) or formats.names_a_format(path):
        source = source_from_path(path)  # an ambiguous directory is an error here too
        return source._native, list(source.classes)
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
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (index, path, reason), skip_bad
    source_bytes: int = 0  # the packed samples' source files (payload_bytes when none was transformed)

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.seconds if self.seconds else float("nan")

    @property
    def img_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds else float("nan")


def pack(
    src,
    dst: str | os.PathLike,
    *,
    shard_size: str | int = "1GB",
    num_threads: int | None = None,
    part: int | None = None,
    parts: int | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    validate: str = "header",
    skip_bad: bool = False,
    max_pixels: int = 200_000_000,
    max_file_bytes: int = 1 << 30,
    max_side: int | None = None,
    max_shorter_side: int | None = None,
    quality: int | None = None,
    keep_original: bool = True,
    raw: bool = False,
    raw_below: int | None = None,
    raw_compression: str | None = None,
    subsampling: str | None = None,
) -> PackSummary:
    """Writes ``src`` (an ImageFolder directory or object, a file list, tar / WebDataset shards, or a
    packed dataset) to ``dst`` as packed shards of about ``shard_size`` bytes, in the source's order.

    Files are written under temporary names and renamed into place at the end, the index last: an
    interrupted pack leaves nothing that opens as a dataset. With ``part=i, parts=n`` this call writes only
    the i-th of n disjoint, contiguous slices of the samples (run one per machine or process), and
    :func:`merge` writes the index once all n are done. ``progress(samples, bytes, total)`` is called about
    every 100 ms; an exception from it (or Ctrl-C) cancels the pack and removes its files.

    Each image is checked before it is packed, so that the loader can decode what is packed:
    ``validate='header'`` (the default) reads its header (a format chute decodes, its dimensions, at most
    ``max_pixels`` pixels); ``validate='full'`` also decodes every pixel, as ``Loader(validate='full')``
    does, which finds damage in the compressed data too but costs a whole decode per image. A file that
    fails fails the pack, naming it; with ``skip_bad=True`` it is left out instead and listed in
    ``PackSummary.skipped``. Read errors fail the pack either way. ``validate='none'`` packs any bytes
    unchecked (payloads that are not images, such as test inputs).
    A sample file larger than ``max_file_bytes`` stops the pack with an error naming it. Every failure
    removes the pack's temporary files; running out of memory, descriptors or threads raises
    :class:`chute.ResourceError` naming the limit.

    Storing less (docs/STORE_LESS.md), for training at low resolution: ``max_side=N`` (the longer side at
    most N) or ``max_shorter_side=N`` (the shorter side at most N, as ``Resize(N)``) resizes larger
    images with PIL's ``Image.resize(size, BILINEAR)``, pixel for pixel, and encodes them again as JPEG
    at ``quality`` (default 90) with ``subsampling`` '420' (default) or '444'. An image within the cap
    keeps its source bytes (``keep_original=True``, the default: no added loss); ``keep_original=False``
    re-encodes every image at ``quality``. ``raw=True`` stores every image as uint8 RGB pixels, which the
    loader reads with no decode; ``raw_below=P`` only those whose stored size has fewer than P pixels;
    ``raw_compression`` 'zstd' (default) or 'none'. The index records what each record holds
    (:func:`describe`, ``chute inspect``).
    """
    import time

    if (part is None) != (parts is None):
        raise ValueError("give both part and parts, or neither")
    if parts is None:
        part, parts = 0, 1
    parts = _validate.integer("parts", parts, 1, _validate.INT32_MAX)
    part = _validate.integer("part", part, 0, _validate.INT32_MAX)
    if not part < parts:
        raise ValueError(f"part must be in [0, parts), got part={part}, parts={parts}")
    started = time.perf_counter()
    num_threads = _validate.integer("num_threads", num_threads, 1, _validate.INT32_MAX, alternatives=(None,))
    shard_bytes = parse_size(shard_size, "shard_size")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable(samples, bytes, total) or None, got {progress!r}")
    if validate not in ("header", "full", "none"):
        raise ValueError(
            f"validate must be 'header' (check each image's header), 'full' (decode every "
            f"pixel) or 'none', got {validate!r}"
        )
    max_pixels = _validate.integer("max_pixels", max_pixels, 1, _validate.INT64_MAX)
    max_file_bytes = _validate.integer("max_file_bytes", max_file_bytes, 1, _validate.UINT64_MAX)
    store = _store_options(
        validate, max_side, max_shorter_side, quality, keep_original, raw, raw_below, raw_compression, subsampling
    )
    from chute import remote

    if remote.is_url(dst):
        if parts > 1:
            raise ValueError(
                "pack(parts=...) writes its parts into one directory that merge() completes: pack the parts "
                "into a local or shared directory, merge, then upload it with chute.packed.upload"
            )
        staging = tempfile.mkdtemp(prefix="chute-pack-", dir=_staging_dir())
        try:
            summary = pack(
                src, staging, shard_size=shard_size, num_threads=num_threads, progress=progress, validate=validate,
                skip_bad=skip_bad, max_pixels=max_pixels, max_file_bytes=max_file_bytes, max_side=max_side,
                max_shorter_side=max_shorter_side, quality=quality, keep_original=keep_original, raw=raw,
                raw_below=raw_below, raw_compression=raw_compression, subsampling=subsampling,
            )  # fmt: skip
            upload(staging, dst)
            summary.seconds = time.perf_counter() - started
            return summary
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    dst = _validate.path("dst", dst)
    source, classes = _source_for(src)
    start = time.perf_counter()
    result = _native.pack(
        source,
        classes,
        dst,
        shard_size=shard_bytes,
        num_threads=num_threads or 0,
        part=part,
        parts=parts,
        progress=progress,
        validate=validate,
        max_pixels=max_pixels,
        skip_bad=bool(skip_bad),
        max_file_bytes=max_file_bytes,
        **store,
    )
    return PackSummary(
        result["samples"],
        result["payload_bytes"],
        result["file_bytes"],
        result["shards"],
        time.perf_counter() - start,
        [tuple(k) for k in result["skipped"]],
        result["source_bytes"],
    )


def _staging_dir() -> str:
    """Where a pack to a URL is written before its upload: the cache directory (local disk, not /tmp,
    which is often small or in memory)."""
    directory = resolve_cache_dir()
    os.makedirs(directory, exist_ok=True)
    return directory


def _store_options(
    validate, max_side, max_shorter_side, quality, keep_original, raw, raw_below, raw_compression, subsampling
) -> dict:
    """pack()'s store-less arguments, checked, as the native pack takes them."""
    max_side = _validate.integer("max_side", max_side, 1, _validate.INT32_MAX, alternatives=(None,))
    max_shorter_side = _validate.integer(
        "max_shorter_side", max_shorter_side, 1, _validate.INT32_MAX, alternatives=(None,)
    )
    if max_side is not None and max_shorter_side is not None:
        raise ValueError("give max_side or max_shorter_side, not both")
    capped = max_side is not None or max_shorter_side is not None
    quality = _validate.integer("quality", quality, 1, 100, alternatives=(None,))
    raw_below = _validate.integer("raw_below", raw_below, 1, _validate.INT64_MAX, alternatives=(None,))
    if not isinstance(keep_original, bool) or not isinstance(raw, bool):
        raise TypeError("keep_original and raw must be bools")
    if quality is not None and (raw or (keep_original and not capped)):
        raise ValueError(
            f"quality={quality} re-encodes nothing here: "
            + (
                "raw=True stores every image as pixels"
                if raw
                else "without max_side or max_shorter_side every image is within the cap and "
                "keep_original=True keeps it; pass keep_original=False to re-encode every image"
            )
        )
    if raw_compression is not None and not raw and raw_below is None:
        raise ValueError("raw_compression applies to raw records: give raw=True or raw_below")
    if raw_compression not in (None, "zstd", "none"):
        raise ValueError(f"raw_compression must be 'zstd' or 'none', got {raw_compression!r}")
    subsampling = None if subsampling is None else str(subsampling)
    if subsampling not in (None, "420", "444"):
        raise ValueError(f"subsampling must be '420' or '444', got {subsampling!r}")
    active = capped or raw or raw_below is not None or not keep_original
    if active and validate == "none":
        raise ValueError("storing less decodes every image: it needs validate='header' or 'full', not 'none'")
    return {
        "max_side": max_side or 0,
        "max_shorter_side": max_shorter_side or 0,
        "quality": quality or 90,
        "subsampling": subsampling or "420",
        "keep_original": keep_original,
        "raw": raw,
        "raw_below": raw_below or 0,
        "raw_compression": raw_compression or "zstd",
    }


def merge(dst: str | os.PathLike) -> PackSummary:
    """Writes ``dst``'s index from the part indexes that ``pack(..., part=i, parts=n)`` left there."""
    import time

    start = time.perf_counter()
    r = _native.merge_parts(_validate.path("dst", dst))
    return PackSummary(
        r["samples"],
        r["payload_bytes"],
        r["file_bytes"],
        r["shards"],
        time.perf_counter() - start,
        source_bytes=r["source_bytes"],
    )


def verify(
    dataset: PackedDataset, *, num_threads: int | None = None, progress: Callable[[int], None] | None = None
) -> list[tuple[int, str]]:
    """Checks every record of a packed dataset (bounds, header against index, XXH3 checksum) on
    ``num_threads`` threads. Returns ``(index, error)`` for each bad record, in order; the error names
    the shard file and record."""
    num_threads = _validate.integer("num_threads", num_threads, 1, _validate.INT32_MAX, alternatives=(None,))
    n = len(dataset)
    chunk = 4096
    ranges = [(b, min(b + chunk, n)) for b in range(0, n, chunk)]
    bad: list[tuple[int, str]] = []
    with ThreadPoolExecutor(num_threads or _native.available_cores()) as pool:
        for (b, e), found in zip(ranges, pool.map(lambda r: dataset._native.verify(*r), ranges)):
            bad.extend(found)
            if progress is not None:
                progress(e - b)
    return bad


def check_images(
    dataset, *, validate: str = "full", num_threads: int | None = None, progress: Callable[[int], None] | None = None
) -> list[tuple[int, str]]:
    """What the loader would refuse in ``dataset`` (a packed dataset, tar shards or an ImageFolder):
    ``validate='full'`` decodes every image whole, ``'header'`` reads headers only. Returns
    ``(index, error)`` for each sample that fails, in order; the error names its path or key."""
    n = len(dataset)
    chunk = 256
    ranges = [(b, min(b + chunk, n)) for b in range(0, n, chunk)]
    bad: list[tuple[int, str]] = []
    with ThreadPoolExecutor(num_threads or _native.available_cores()) as pool:
        for (b, e), found in zip(
            ranges, pool.map(lambda r: _native.check_images(dataset._native, r[0], r[1], validate), ranges)
        ):
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
        shards = [
            {"file": name, "records": records, "bytes": size} for name, records, size, _ in dataset._native.shards()
        ]
        index_bytes = os.path.getsize(os.path.join(directory, INDEX_FILE))
        kind, version = "chute packed shards", FORMAT_VERSION
    elif not isinstance(dataset, TarDataset):  # chute.formats: indexes are cached apart from the data
        shards, index_bytes, kind, version = dataset.files(), 0, dataset.kind, None
    else:
        shards = [
            {"file": p, "records": None, "bytes": os.path.getsize(p), "index": index or None}
            for p, index in zip(dataset._native.tar_paths(), dataset._native.index_paths())
        ]
        index_bytes = 0  # indexes are cached apart from the dataset (or held in memory)
        kind, version = "tar / WebDataset", None
    stored: dict = {}
    if isinstance(dataset, PackedDataset):
        version = dataset._native.format_version
        kinds, _, _, source_bytes = dataset._native.records()
        counts = np.bincount(np.asarray(kinds, dtype=np.int64), minlength=len(_native.RECORD_KINDS))
        source_total = int(np.asarray(source_bytes, dtype=np.int64).sum())
        stored = {
            "records": {name: int(c) for name, c in zip(_native.RECORD_KINDS, counts) if c},
            "source_bytes": source_total,
            "size_ratio": float(sizes.sum() / source_total) if source_total else None,
        }
    percentiles = (0, 10, 50, 90, 99, 100)
    values = np.percentile(sizes, percentiles).round().astype(int).tolist() if len(sizes) else [0] * len(percentiles)
    labelled = labels[labels >= 0]
    return {
        "path": getattr(dataset, "path", None) or dataset.paths,
        "kind": kind,
        "format_version": version,
        "samples": int(len(sizes)),
        "skipped": dataset.skipped if isinstance(dataset, TarDataset) else [],
        "classes": len(dataset.classes) if dataset.classes else int(len(np.unique(labelled))),
        "unlabelled": int((labels < 0).sum()),
        "shards": shards,
        "bytes": int(sum(s["bytes"] for s in shards) + index_bytes),
        "payload_bytes": int(sizes.sum()),
        "image_bytes": {
            "mean": float(sizes.mean()) if len(sizes) else 0.0,
            **{("min" if p == 0 else "max" if p == 100 else f"p{p}"): v for p, v in zip(percentiles, values)},
        },
        **stored,
    }


def _source_keys(source) -> list[str]:
    """The key ``pack`` stores for each sample of a native source (bind_packed.cc's key_function)."""
    if isinstance(source, _native.TarSource):
        return [source.member(i) for i in range(len(source))]
    names = list(source.names())
    root = getattr(source, "root", None)
    if root is None:
        return names
    prefix = os.path.join(root, "")
    return [n[len(prefix) :] if n.startswith(prefix) else n for n in names]


def compare(dataset: PackedDataset, src, *, sample: int = 64, seed: int = 0) -> dict:
    """How far the stored pixels of ``dataset`` are from its source ``src`` (what :func:`pack` read), on
    ``sample`` records drawn at random (``seed``): each record's source is decoded with PIL
    (``Image.open(...).convert("RGB")``), resized to the record's size with ``Image.resize(size,
    BILINEAR)`` when it differs, and compared with the record decoded as the loader decodes it. Records
    are matched to source samples by key. Returns the pooled PSNR in dB (None when every pixel is equal),
    the lowest per-record PSNR, the mean and the largest absolute error, and the records compared (their
    count and indices)."""
    import io
    import math

    import numpy as np
    from PIL import Image

    source, _ = _source_for(src)
    by_key = {k: i for i, k in enumerate(_source_keys(source))}
    n = len(dataset)
    picks = sorted(np.random.default_rng(seed).choice(n, size=min(n, sample), replace=False).tolist())
    squared, count, abs_sum, worst, lowest = 0.0, 0, 0.0, 0, math.inf
    compared = []
    for i in picks:
        key = dataset._native.name(i)
        if key not in by_key:
            raise ValueError(
                f"record {i} ({key!r}) has no sample with that key in {src!r}: is it the source "
                "this dataset was packed from?"
            )
        rgb, w, h = _native.decode_rgb(_native.read_sample(dataset._native, i))
        stored = np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3).astype(np.int32)
        with Image.open(io.BytesIO(_native.read_sample(source, by_key[key]))) as im:
            ref = im.convert("RGB")
        if ref.size != (w, h):
            ref = ref.resize((w, h), Image.BILINEAR)
        diff = stored - np.asarray(ref, dtype=np.int32)
        mse = float((diff * diff).mean())
        squared += float((diff * diff).sum())
        count += diff.size
        abs_sum += float(np.abs(diff).sum())
        worst = max(worst, int(np.abs(diff).max()))
        lowest = min(lowest, 10 * math.log10(255**2 / mse) if mse else math.inf)
        compared.append(i)
    pooled = squared / count if count else 0.0
    return {
        "records": len(compared),
        "indices": compared,
        "psnr_db": 10 * math.log10(255**2 / pooled) if pooled else None,
        "min_psnr_db": lowest if lowest != math.inf else None,
        "mean_abs_error": abs_sum / count if count else 0.0,
        "max_error": worst,
    }


def upload(directory: str | os.PathLike, url: str, *, chunk_bytes: int = 8 << 20, parallel: int = 4) -> None:
    """Uploads a packed dataset directory to ``url`` (a prefix): its shards first, ``parallel`` at a time, each
    an atomic multipart upload (an object appears only once whole), then its index. chute opens a dataset by
    its index, so readers never see a partial dataset. Write a new dataset to a new prefix: replacing the
    shards of one being read makes its readers fail (each shard is checked against the index they hold)."""
    from chute import remote

    directory = os.fspath(directory)
    names = sorted(os.listdir(directory))
    if INDEX_FILE not in names:
        raise FileNotFoundError(f"{directory} holds no {INDEX_FILE}: not a complete chute dataset")
    base = url if url.endswith("/") else url + "/"
    objects = remote.store()

    def put(name: str) -> None:
        # builtins.open: this module's open() is chute.open
        with builtins.open(os.path.join(directory, name), "rb") as f, objects.begin_upload(base + name) as upload:
            while chunk := f.read(chunk_bytes):
                upload.write(chunk)

    shards = [n for n in names if n != INDEX_FILE and not n.startswith(".")]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(put, n) for n in shards]:
            future.result()
    put(INDEX_FILE)
