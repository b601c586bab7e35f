"""Tensor-dataset fast path against torch's DataLoader, and against memcpy, in one run.

    python bench/tensor_dataset.py [--samples 10000] [--batch-size 64] [--epochs 2]

A TensorDataset of N x 3 x 224 x 224 float32 images (10000: 6.0 GB) and int64 labels, batch 64, shuffled
(a random row per sample: what training reads). Every loader runs one warm-up epoch, then --epochs timed
epochs, interleaved round by round with the others (chute.bench.harness: a shared machine's load falls on
all alike); the median epoch counts, its range is printed. The consumer only receives each batch (the
loader's own rate).

* torch's DataLoader with num_workers 0 and 2 (pin_memory=False; workers persistent, so start-up is not
  counted against them), the best of which is the peer;
* chute's fast path (chute.DataLoader when it is importable, else plan.choose + Plan.batches, which is
  what chute.DataLoader runs);
* memcpy bandwidth, measured here: copying each batch's bytes from a contiguous slice of the dataset into
  a warm buffer with torch's copy_ (which uses all of torch's intra-op threads), and with index_select into
  a warm buffer (the same random rows, one call per batch).

Printed: images/s and GB/s of each, the ratio against the best DataLoader (target >= 10x), and the fast
path's share of memcpy bandwidth (target >= 50%).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from chute.bench.harness import Contender, interleave, time_call, time_epoch


def make_dataset(n: int) -> TensorDataset:
    # Every page written (resident, not the shared zero page), rows distinct, cheaper than randn.
    x = torch.empty(n, 3, 224, 224)
    x.copy_(torch.rand(1, 3, 224, 224).expand_as(x))
    x[:, 0, 0, 0] = torch.arange(n, dtype=torch.float32)
    return TensorDataset(x, torch.arange(n))


def torch_epochs(ds, batch_size: int, workers: int):
    loader = DataLoader(
        ds, batch_size=batch_size, shuffle=True, num_workers=workers, pin_memory=False, persistent_workers=workers > 0
    )
    return lambda: time_epoch(loader)


def chute_epochs(ds, batch_size: int):
    """One epoch of chute.DataLoader per call (its tensor fast path: checked), and what runs it."""
    from chute import DataLoader as ChuteDataLoader

    loader = ChuteDataLoader(ds, batch_size=batch_size, shuffle=True)
    path = loader.stats()["path"]
    if path != "fast:tensor":
        raise SystemExit(f"chute.DataLoader took the {path} path ({loader.stats()['fallback_reason']})")
    return (lambda: time_epoch(loader)), "chute.DataLoader"


def memcpy_epochs(ds, batch_size: int):
    """Timings of a contiguous copy_ and of index_select of random rows, each into a warm buffer."""
    x = ds.tensors[0]
    n = x.shape[0] // batch_size * batch_size
    dst = torch.empty(batch_size, *x.shape[1:])
    dst.fill_(0)

    def contiguous() -> int:
        for i in range(0, n, batch_size):
            dst.copy_(x[i : i + batch_size])
        return n

    def gather() -> int:
        for i in range(0, n, batch_size):
            torch.index_select(x, 0, perm[i : i + batch_size], out=dst)
        return n

    perm = torch.randperm(x.shape[0])[:n]  # drawn once (outside the timed span): the rows a shuffle reads
    return (lambda: time_call(contiguous)), (lambda: time_call(gather))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=10000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per loader (median), after one warm-up")
    p.add_argument("--workers", type=int, nargs="*", default=[0, 2])
    args = p.parse_args(argv)

    sample_bytes = 3 * 224 * 224 * 4 + 8
    t0 = time.perf_counter()
    ds = make_dataset(args.samples)
    print(
        f"dataset: {args.samples} x 3x224x224 float32 ({args.samples * sample_bytes / 1e9:.2f} GB) built in "
        f"{time.perf_counter() - t0:.1f} s; batch {args.batch_size}, shuffle=True; cores: {len(os.sched_getaffinity(0))}, "
        f"torch threads: {torch.get_num_threads()}, torch {torch.__version__}"
    )

    def row(name, c):
        rate = c.rate
        print(
            f"  {name:<44} {rate:10.0f} img/s  {rate * sample_bytes / 1e9:6.2f} GB/s  "
            f"(range {c.summary.range_text()} img/s)"
        )

    runs = {f"torch DataLoader num_workers={w}": torch_epochs(ds, args.batch_size, w) for w in args.workers}
    chute_run, how = chute_epochs(ds, args.batch_size)
    chute_name = f"chute fast path ({how})"
    runs[chute_name] = chute_run
    runs["memcpy: contiguous copy_ into a warm buffer"], runs["memcpy: index_select of the rows, warm buffer"] = (
        memcpy_epochs(ds, args.batch_size)
    )
    # Interleaved rounds, so that load from other processes on a shared machine falls on all of them alike;
    # the warm-up round starts workers and faults buffers in; the median later round counts.
    contenders = {name: Contender(name, run) for name, run in runs.items()}
    interleave(list(contenders.values()), rounds=args.epochs)
    median = {name: c.rate for name, c in contenders.items()}
    for name, c in contenders.items():
        row(name, c)
    torch_rates = {w: median[f"torch DataLoader num_workers={w}"] for w in args.workers}
    chute_rate = median[chute_name]
    copy_rate = median["memcpy: contiguous copy_ into a warm buffer"]
    select_rate = median["memcpy: index_select of the rows, warm buffer"]
    best_w = max(torch_rates, key=torch_rates.get)
    memcpy = max(copy_rate, select_rate)
    print(f"ratio vs best DataLoader (num_workers={best_w}): {chute_rate / torch_rates[best_w]:.2f}x (target >= 10x)")
    print(f"fast path / memcpy bandwidth: {100 * chute_rate / memcpy:.0f}% (target >= 50%)")
    print(
        f"ceiling on the ratio here, memcpy / best DataLoader: {memcpy / torch_rates[best_w]:.2f}x; "
        f"load average: {os.getloadavg()[0]:.2f} on {len(os.sched_getaffinity(0))} cores"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
