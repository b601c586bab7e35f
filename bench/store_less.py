"""Store less: the training pipeline's throughput from originals against `chute pack --max-side 256` and a
raw-256 pack of the same photos, interleaved, medians, in one run.

    .venv/bin/python bench/store_less.py [--images 400] [--rounds 3] [--threads N] [--size 224]

The photos are the `chute bench` dataset's (ImageNet-like JPEGs of about 500x375 and 100 KB, generated
once); the first --images of them are packed four ways into a temporary directory: as they are, with
--max-side 256 (re-encoded JPEG, quality 90, 4:2:0), with --max-side 256 --raw (zstd) and with
--raw-compression none. Each round
runs one epoch of each (RandomResizedCrop(size), RandomHorizontalFlip, batches of 64, shuffled, --threads
decode threads), delivering float32 normalised (chute bench's training pipeline) and uint8, after a warm-up
epoch, everything in the page cache (hot). Throughput is images per second at the consumer; the ratios are
against the originals in the same round (chute.bench.harness times and interleaves the epochs).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

import chute
from chute.bench.dataset import ensure_dataset
from chute.bench.harness import Contender, Summary, Timing, interleave, time_epoch
from chute.bench.torch_peer import IMAGENET_MEAN, IMAGENET_STD
from chute.inspection import describe

VARIANTS = {
    "originals": {},
    "--max-side 256": {"max_side": 256},
    "--max-side 256 --raw": {"max_side": 256, "raw": True},
    "... --raw-compression none": {"max_side": 256, "raw": True, "raw_compression": "none"},
}
# The bench's training pipeline (chute bench: float32, normalised), and the same delivering uint8 (the
# normalisation left to the GPU).
OUTPUTS = {"float32 normalised": torch.float32, "uint8": torch.uint8}


def epoch(dataset, size: int, threads: int, dtype: torch.dtype) -> Timing:
    transforms = [chute.RandomResizedCrop(size), chute.RandomHorizontalFlip()]
    if dtype == torch.float32:
        transforms.append(chute.Normalize(IMAGENET_MEAN, IMAGENET_STD))
    loader = chute.Loader(dataset, 64, shuffle=True, transforms=transforms, dtype=dtype, num_threads=threads)
    return time_epoch(loader)


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
            print(
                f"{name:22s} {summary.payload_bytes / 1e6:7.1f} MB stored "
                f"({summary.payload_bytes / summary.source_bytes:6.1%} of the source), "
                f"records {describe(datasets[name])['records']}"
            )
        contenders = {
            (out, name): Contender(
                f"{out} {name}", lambda d=datasets[name], t=OUTPUTS[out]: epoch(d, args.size, args.threads, t)
            )
            for out in OUTPUTS
            for name in VARIANTS
        }
        interleave(list(contenders.values()), rounds=args.rounds)  # the warm-up fills the cache and allocator
        rates = {key: c.rates for key, c in contenders.items()}
    print(
        f"\ntraining pipeline (RandomResizedCrop({args.size}), flip) on {args.images} images, {args.threads} "
        f"threads, {args.rounds} interleaved rounds, medians (hot cache):"
    )
    for (out, name), r in rates.items():
        per_round = [x / o for x, o in zip(r, rates[(out, "originals")])]
        print(
            f"{out:19s} {name:27s} {Summary.of(r).median:7.0f} img/s  {Summary.of(per_round).median:5.2f}x "
            f"originals (per round: {', '.join(f'{x:.2f}' for x in per_round)})"
        )


if __name__ == "__main__":
    main()
