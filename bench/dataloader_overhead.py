"""Per-batch overhead of chute.DataLoader's generic path against torch's DataLoader, in one run.

The dataset's __getitem__ is trivial (a small tensor and an int), so the time per batch is the loader's own
overhead: fetching indices, collating, moving the batch from worker to parent, rebuilding it. For each
num_workers and batch size, torch and chute run alternately (interleaved repeats, chute.bench.harness, after
warm-up batches on a started iterator); the figure is the median wall time per batch the consumer received,
in microseconds.

    python bench/dataloader_overhead.py                     # num_workers 0, 2, 4; batch sizes 1, 64, 256
    python bench/dataloader_overhead.py --shape 3 64 64     # a bigger sample, where per-tensor shm costs show
"""

from __future__ import annotations

import argparse
import functools

import torch
from torch.utils.data import Dataset

from chute import DataLoader as ChuteDataLoader
from chute.bench.harness import Contender, Timing, interleave, time_epoch


class Trivial(Dataset):
    def __init__(self, n: int, shape: tuple[int, ...]):
        self.n = n
        self.sample = torch.zeros(shape)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.sample, i


def run(cls, dataset, batch_size: int, num_workers: int, batches: int, warmup: int) -> Timing:
    """A fresh loader and iterator, ``warmup`` batches untimed, then ``batches`` timed (items = batches)."""
    loader = cls(dataset, batch_size=batch_size, num_workers=num_workers)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    timing = time_epoch(it, max_batches=batches, count=lambda _: 1)  # counting costs nothing per batch
    del it
    return timing


def per_batch_us(c: Contender) -> float:
    return 1e6 * c.summarize(lambda t: t.seconds / t.batches).median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--shape", type=int, nargs="+", default=[16], help="shape of each sample's tensor")
    ap.add_argument("--batches", type=int, default=1000, help="timed batches per run")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved torch/chute runs per row")
    args = ap.parse_args()

    torch.set_num_threads(1)
    shape = tuple(args.shape)
    print(
        f"sample: float32 tensor {list(shape)} + int label; {args.batches} timed batches after {args.warmup} "
        f"warm-up, median of {args.repeats} interleaved runs; torch {torch.__version__}"
    )
    print(f"{'workers':>7} {'batch':>6} {'torch us/batch':>15} {'chute us/batch':>15} {'torch/chute':>12}")
    for nw in args.workers:
        for bs in args.batch_sizes:
            n = (args.batches + args.warmup + 2 * nw * 2) * bs
            dataset = Trivial(n, shape)
            measure = functools.partial(
                run, dataset=dataset, batch_size=bs, num_workers=nw, batches=args.batches, warmup=args.warmup
            )
            t = Contender("torch", functools.partial(measure, torch.utils.data.DataLoader))
            c = Contender("chute", functools.partial(measure, ChuteDataLoader))
            interleave([t, c], rounds=args.repeats, warmup=0)  # each run warms its own fresh iterator up
            tm, cm = per_batch_us(t), per_batch_us(c)
            print(f"{nw:>7} {bs:>6} {tm:>15.1f} {cm:>15.1f} {tm / cm:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
