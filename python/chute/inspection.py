"""Inspecting a written dataset: :func:`verify` checks every record of a packed dataset, :func:`check_images`
decodes every image as the loader would, :func:`describe` is what ``chute inspect`` prints, and :func:`compare`
measures the stored pixels against the source the pack read. The checks run natively, several ranges of
samples at once."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from chute import _native, _validate
from chute.resolve import native_source
from chute.sources import INDEX_FILE, PackedDataset, TarDataset


def verify(
    dataset: PackedDataset, *, num_threads: int | None = None, progress: Callable[[int], None] | None = None
) -> list[tuple[int, str]]:
    """Checks every record of a packed dataset (bounds, header against index, XXH3 checksum) on
    ``num_threads`` threads. Returns ``(index, error)`` for each bad record, in order; the error names
    the shard file and record."""
    return _in_ranges(len(dataset), 4096, dataset._native.verify, num_threads, progress)


def check_images(
    dataset, *, validate: str = "full", num_threads: int | None = None, progress: Callable[[int], None] | None = None
) -> list[tuple[int, str]]:
    """What the loader would refuse in ``dataset`` (a packed dataset, tar shards or an ImageFolder):
    ``validate='full'`` decodes every image whole, ``'header'`` reads headers only. Returns
    ``(index, error)`` for each sample that fails, in order; the error names its path or key."""
    return _in_ranges(
        len(dataset), 256, lambda b, e: _native.check_images(dataset._native, b, e, validate), num_threads, progress
    )


def _in_ranges(
    n: int,
    chunk: int,
    check: Callable[[int, int], list[tuple[int, str]]],
    num_threads: int | None,
    progress: Callable[[int], None] | None,
) -> list[tuple[int, str]]:
    """``check(begin, end)`` (a native call that releases the GIL) over [0, n) in ranges of ``chunk`` samples,
    ``num_threads`` at a time (default: the usable cores): what each found, in order."""
    num_threads = _validate.integer("num_threads", num_threads, 1, _validate.INT32_MAX, alternatives=(None,))
    ranges = [(b, min(b + chunk, n)) for b in range(0, n, chunk)]
    bad: list[tuple[int, str]] = []
    with ThreadPoolExecutor(num_threads or _native.available_cores()) as pool:
        for (b, e), found in zip(ranges, pool.map(lambda r: check(*r), ranges)):
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
        kind, version = "chute packed shards", dataset._native.format_version
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

    source, _ = native_source(src)
    by_key = {k: i for i, k in enumerate(source.keys())}  # what pack stored: Source::key
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
