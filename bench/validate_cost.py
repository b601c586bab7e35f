"""What validate='full' costs against the default validate='window' on the training pipeline.

    .venv/bin/python bench/validate_cost.py [--rounds 7] [--threads N] [--batch-size 256]

The reference workload (docs/ARCHITECTURE.md): chute's bench photos (about 500x375 JPEGs, ImageNet's typical
size, generated and cached once by chute/bench/dataset.py), RandomResizedCrop(224) + RandomHorizontalFlip +
Normalize to float32, batch 256. 'window' decodes what each random crop needs (crop-on-decode); 'full' decodes
every pixel of every image and uses the crop's part, so damage outside the crop fails in every epoch.

A warm-up epoch of each, then --rounds rounds of one epoch of each, alternating (chute.bench.storage's
interleaved_rates), hot cache. Per setting: images per second at the consumer (img/s) and per CPU-second of
this process (img/CPUs, chute's threads run in it: the per-core rate, which holds while other work shares the
cores), median and range. The cost is 'full''s epoch time over 'window''s, taken within each round (the two
epochs ran back to back, so load from other work mostly cancels), median and range over the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import torch

import chute
from chute.bench.dataset import ensure_dataset
from chute.bench.run import available_cores
from chute.bench.storage import interleaved_rates

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    root = ensure_dataset(progress=False)
    source = chute.ImageFolder(root)
    settings = ("window", "full")
    with contextlib.ExitStack() as open_loaders:
        loaders = {
            v: open_loaders.enter_context(
                chute.Loader(
                    source,
                    args.batch_size,
                    shuffle=True,
                    seed=0,
                    num_threads=args.threads,
                    validate=v,
                    dtype=torch.float32,
                    transforms=[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(), chute.Normalize(MEAN, STD)],
                )
            )
            for v in settings
        }
        rates = interleaved_rates(loaders, args.rounds)
    print(
        f"validate='full' against 'window': {len(source)} bench photos (~500x375), RandomResizedCrop(224) + flip + "
        f"Normalize (float32), batch {args.batch_size}, {args.threads} threads; warm-up, then {args.rounds} "
        "interleaved rounds; medians (range)"
    )
    header = f"{'validate':10s} {'img/s':>20s} {'img/CPUs':>20s}"
    print(header)
    print("-" * len(header))
    for v in settings:
        print(f"{v:10s} {spread(rates[v].wall, '.0f'):>20s} {spread(rates[v].cpu, '.0f'):>20s}")
    wall = [w / f for w, f in zip(rates["window"].wall, rates["full"].wall, strict=True)]
    cpu = [w / f for w, f in zip(rates["window"].cpu, rates["full"].cpu, strict=True)]
    print(f"'full' epoch time / 'window' epoch time, per round: wall {spread(wall, '.2f')}x, CPU {spread(cpu, '.2f')}x")


if __name__ == "__main__":
    main()
