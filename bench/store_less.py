"""Store less: the training pipeline's throughput from originals against `chute pack --max-side 256` and a
raw-256 pack of the same photos, interleaved, medians, in one run.

    .venv/bin/python bench/store_less.py [--images 400] [--rounds 3] [--threads N] [--size 224]

The photos are the `chute bench` dataset's (ImageNet-like JPEGs of about 500x375 and 100 KB, generated
once); the first --images of them are packed three ways into a temporary directory: as they are, with
--max-side 256 (re-encoded JPEG, quality 90, 4:2:0), and with --max-side 256 --raw (zstd). Each round
runs one epoch of each (RandomResizedCrop(size), RandomHorizontalFlip, float32 batches of 64, shuffled,
--threads decode threads) after a warm-up epoch, everything in the page cache (hot). Throughput is images
per second at the consumer; the ratios are against the originals in the same round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import chute
from chute.bench.dataset import ensure_dataset

VARIANTS = {
    "originals": {},
    "--max-side 256": {"max_side": 256},
    "--max-side 256 --raw": {"max_side": 256, "raw": True},
}


def epoch_rate(dataset, size: int, threads: int) -> float:
    loader = chute.Loader(dataset, 64, shuffle=True, transforms=[chute.RandomResizedCrop(size),
                                                                 chute.RandomHorizontalFlip()],
                          dtype=torch.float32, num_threads=threads)
    start, images = time.perf_counter(), 0
    for x, _ in loader:
        images += x.shape[0]
    return images / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()
    root = args.root or ensure_dataset()
    samples = chute.ImageFolder(root).samples[: args.images]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "list.txt").write_text("".join(f"{p} {label}\n" for p, label in samples))
        datasets = {}
        for name, options in VARIANTS.items():
            summary = chute.pack(tmp / "list.txt", tmp / name.replace(" ", "_"), **options)
            datasets[name] = chute.open(tmp / name.replace(" ", "_"))
            print(f"{name:22s} {summary.payload_bytes / 1e6:7.1f} MB stored "
                  f"({summary.payload_bytes / summary.source_bytes:6.1%} of the source), "
                  f"records {chute.packed.describe(datasets[name])['records']}")
        rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for name, ds in datasets.items():
            epoch_rate(ds, args.size, args.threads)  # warm-up: page cache, allocator, threads
        for _ in range(args.rounds):
            for name, ds in datasets.items():
                rates[name].append(epoch_rate(ds, args.size, args.threads))
    base = statistics.median(rates["originals"])
    print(f"\ntraining pipeline at {args.size}, {args.images} images, {args.threads} threads, "
          f"{args.rounds} interleaved rounds, medians (hot cache):")
    for name, r in rates.items():
        per_round = [x / o for x, o in zip(r, rates["originals"])]
        print(f"{name:22s} {statistics.median(r):8.0f} img/s  {statistics.median(per_round):5.2f}x originals "
              f"(per round: {', '.join(f'{x:.2f}' for x in per_round)})")


if __name__ == "__main__":
    main()
