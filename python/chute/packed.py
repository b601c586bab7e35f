"""Writing packed datasets: ``chute.pack`` writes chute's shard format (docs/FORMAT.md) from any source,
:func:`merge` completes a pack split into parts, :func:`upload` puts a packed directory into object storage,
and :func:`index` writes tar shards' indexes ahead of their first open. The work is native (reading,
hashing and writing run in C++ threads, without the GIL); this module resolves paths and options. Reading
is :func:`chute.open`; :mod:`chute.inspection` checks and describes what was written."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from chute import _native, _validate
from chute._validate import parse_size
from chute.cache import resolve_cache_dir
from chute.resolve import native_source, tar_paths
from chute.sources import INDEX_FILE

FORMAT_VERSION = _native.FORMAT_VERSION  # the version pack() writes


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
    source, classes = native_source(src)
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


def index(path_or_glob: str | os.PathLike) -> list[str]:
    """Builds the index of each tar file ahead of the first open, beside it as ``<tar>.chidx`` (the one
    case where chute writes into a dataset's directory: asked for here); returns the tars."""
    path = os.fsdecode(_validate.path("path_or_glob", path_or_glob))
    tars = tar_paths(path)
    if tars is None:
        raise ValueError(f"{path!r} names no tar file")
    _native.write_tar_indexes(tars)
    return tars


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
        with open(os.path.join(directory, name), "rb") as f, objects.begin_upload(base + name) as upload:
            while chunk := f.read(chunk_bytes):
                upload.write(chunk)

    shards = [n for n in names if n != INDEX_FILE and not n.startswith(".")]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(put, n) for n in shards]:
            future.result()
    put(INDEX_FILE)
