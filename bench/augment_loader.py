"""chute.Loader's train throughput with the augmentations of today's recipes against the plain pipeline, in
one run.

    python bench/augment_loader.py [--images 2000] [--batch-size 256] [--rounds 3] [--threads N]

The dataset is chute's bench set (python/chute/bench/dataset.py: ImageNet-like JPEGs, ~500x375, ~100 KB,
cached). Every pipeline is RandomResizedCrop(224) + RandomHorizontalFlip, float32, ImageNet Normalize, and:

* plain:     nothing more
* taw:       TrivialAugmentWide (torchvision's reference ImageNet recipe)
* taw+erase: TrivialAugmentWide, then RandomErasing(p=0.25) after Normalize (the recipe with its erasing)
* randaug:   RandAugment(2, 9)
* autoaug:   AutoAugment(IMAGENET)
* augmix:    AugMix() (torchvision runs it on tensors: bilinear, float32 mixing)

Pipelines run interleaved round by round (chute.bench.harness), a warm-up epoch each; printed: the median
images/s with its range, images per CPU-second of this process (per busy core, which other jobs on a
shared machine distort less than wall time), and each pipeline's cost against plain.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import chute
from chute.bench.harness import Contender, interleave, time_epoch

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

PIPELINES = {
    "plain": [],
    "taw": [chute.TrivialAugmentWide()],
    "taw+erase": [chute.TrivialAugmentWide(), "erase"],
    "randaug": [chute.RandAugment()],
    "autoaug": [chute.AutoAugment()],
    "augmix": [chute.AugMix()],
}


def transforms(extra: list) -> list:
    augment = [t for t in extra if t != "erase"]
    tail = [chute.RandomErasing(p=0.25)] if "erase" in extra else []
    return [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(), *augment, chute.Normalize(MEAN, STD), *tail]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="auto", type=lambda v: v if v == "auto" else int(v), help="worker threads")
    p.add_argument("--pipelines", nargs="+", choices=list(PIPELINES), default=list(PIPELINES))
    args = p.parse_args(argv)

    from chute.bench.dataset import ensure_dataset

    root = ensure_dataset(None, num_images=args.images)
    source = chute.ImageFolder(root)
    for path, _ in source.samples:  # warm page cache
        with open(path, "rb") as f:
            f.read()
    print(f"{len(source)} JPEGs in {root}; batch {args.batch_size}; cores {len(os.sched_getaffinity(0))}")
    contenders = []
    for name in args.pipelines:
        loader = chute.Loader(
            source,
            batch_size=args.batch_size,
            shuffle=True,
            transforms=transforms(PIPELINES[name]),
            dtype=torch.float32,
            num_threads=args.threads,
        )
        contenders.append(
            Contender(
                name, lambda loader=loader: time_epoch(loader, cpu_clock=time.process_time), info={"loader": loader}
            )
        )
    interleave(contenders, rounds=args.rounds, on_step=lambda s: print(f"  {s}", flush=True))
    plain = next((c for c in contenders if c.name == "plain"), None)
    print(f"{'pipeline':<10} {'images/s':>9} {'range':>13} {'img/CPU-s':>10} {'vs plain':>9}")
    for c in contenders:
        per_cpu = c.summarize(lambda t: t.items / t.cpu_seconds if t.cpu_seconds else 0.0)
        ratio = f"{c.rate / plain.rate:.2f}x" if plain and plain.rate else "-"
        print(f"{c.name:<10} {c.rate:9.0f} {c.summary.range_text():>13} {per_cpu.median:10.0f} {ratio:>9}")
        c.info["loader"].close()
    load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    busy = " (above the core count: other processes took CPU time)" if load > cores else ""
    print(f"load average during the run: {load:.2f} on {cores} cores{busy}")


if __name__ == "__main__":
    main()
