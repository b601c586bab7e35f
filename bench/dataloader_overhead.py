"""Per-batch overhead of chute.DataLoader's generic path against torch's DataLoader, in one run.

The dataset's __getitem__ is trivial (a small tensor and an int), so the time per batch is the loader's own
overhead: fetching indices, collating, moving the batch from worker to parent, rebuilding it. For each
num_workers and batch size, torch and chute run alternately (interleaved repeats, after warm-up batches on a
started iterator); the figure is the median wall time per batch the consumer received, in microseconds.

    python bench/dataloader_overhead.py                     # num_workers 0, 2, 4; batch sizes 1, 64, 256
    python bench/dataloader_overhead.py --shape 3 64 64     # a bigger sample, where per-tensor shm costs show
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import Dataset

from chute import DataLoader as ChuteDataLoader


class Trivial(Dataset):
    def __init__(self, n: int, shape: tuple[int, ...]):
        self.n = n
        self.sample = torch.zeros(shape)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.sample, i


def per_batch_us(cls, dataset, batch_size: int, num_workers: int, batches: int, warmup: int) -> float:
    loader = cls(dataset, batch_size=batch_size, num_workers=num_workers)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        batch = next(it)
        del batch
    dt = time.perf_counter() - t0
    del it
    return dt / batches * 1e6


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
    print(f"sample: float32 tensor {list(shape)} + int label; {args.batches} timed batches after {args.warmup} "
          f"warm-up, median of {args.repeats} interleaved runs; torch {torch.__version__}")
    print(f"{'workers':>7} {'batch':>6} {'torch us/batch':>15} {'chute us/batch':>15} {'torch/chute':>12}")
    for nw in args.workers:
        for bs in args.batch_sizes:
            n = (args.batches + args.warmup + 2 * nw * 2) * bs
            dataset = Trivial(n, shape)
            t, c = [], []
            for _ in range(args.repeats):
                t.append(per_batch_us(torch.utils.data.DataLoader, dataset, bs, nw, args.batches, args.warmup))
                c.append(per_batch_us(ChuteDataLoader, dataset, bs, nw, args.batches, args.warmup))
            tm, cm = statistics.median(t), statistics.median(c)
            print(f"{nw:>7} {bs:>6} {tm:>15.1f} {cm:>15.1f} {tm / cm:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
