"""CPU scaling of the train pipeline (RandomResizedCrop(224) + flip + Normalize, float32) on the machine's cores:
chute's img/s at 1, 2, 4, 8, ... threads (up to the cores) and torch's DataLoader (torchvision ImageFolder and
transforms) at the same worker counts, on the same photos, interleaved count by count. Each figure is the images
the consumer received over ``--seconds`` of steady state (after two warm-up batches: workers started, buffers
faulted in). Efficiency is rate(k) / (k x rate(1)), each family against its own one-thread rate.

    python bench/cpu_scaling.py --data DIR --json OUT [--batch-size 64] [--seconds 2.5] [--counts 1,2,4,8,16]

Part of bench/gpu_check.sh (it runs on the lent machine's 16 cores; no GPU is used).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import chute
from chute.bench.run import chute_transforms
from chute.bench.torch_peer import make_dataloader, uses_torchvision


def rate(batches, seconds: float) -> tuple[float, int]:
    """(img/s, images) the consumer received over ``seconds`` after two warm-up batches (workers started, buffers
    faulted in, what was prepared during the start-up taken), and over at least three batches."""
    it = iter(batches)
    next(it), next(it)
    images, n, start = 0, 0, time.perf_counter()
    for x, _ in it:
        images += x.shape[0]
        n += 1
        if n >= 3 and time.perf_counter() - start >= seconds:
            break
    return images / (time.perf_counter() - start), images


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seconds", type=float, default=2.5)
    p.add_argument("--counts", default=None, help="thread/worker counts (default: 1, 2, 4, ... up to the cores)")
    args = p.parse_args()
    cores = chute._native.available_cores()
    counts = (
        [int(c) for c in args.counts.split(",")] if args.counts else [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= cores]
    )
    print(f"train pipeline, batch {args.batch_size}, {cores} cores, {args.seconds} s per figure; DataLoader on "
          f"{'torchvision' if uses_torchvision() else 'the PIL reference (no torchvision)'}", flush=True)  # fmt: skip
    rows = []
    for k in counts:
        with chute.Loader(
            chute.ImageFolder(args.data), batch_size=args.batch_size, shuffle=True, drop_last=True, num_threads=k,
            transforms=chute_transforms("train"), dtype=torch.float32, pin_memory=False,
        ) as loader:  # fmt: skip
            c, _ = rate(_epochs(loader), args.seconds)
        dl = make_dataloader(args.data, batch_size=args.batch_size, num_workers=k)
        d, _ = rate(_epochs(dl), args.seconds)
        del dl
        rows.append({"count": k, "chute_img_s": round(c, 1), "dataloader_img_s": round(d, 1)})
        print(f"  {k:3d}: chute {c:8.0f} img/s   DataLoader {d:8.0f} img/s   ratio {c / d:5.2f}", flush=True)
    one = rows[0]
    for r in rows:
        k = r["count"] / one["count"]
        r["chute_efficiency"] = round(r["chute_img_s"] / (k * one["chute_img_s"]), 3)
        r["dataloader_efficiency"] = round(r["dataloader_img_s"] / (k * one["dataloader_img_s"]), 3)
    two = next((r for r in rows if r["count"] == 2 * one["count"]), None)
    figures = {"cores": cores, "batch_size": args.batch_size, "seconds": args.seconds, "rows": rows}
    checks = [{"name": "scaling", "status": "PASS", "detail": "; ".join(
        f"{r['count']}: chute {r['chute_img_s']:.0f} ({r['chute_efficiency']:.2f}), DataLoader {r['dataloader_img_s']:.0f} "
        f"({r['dataloader_efficiency']:.2f})" for r in rows)}]  # fmt: skip
    targets = []
    if two is not None:  # docs/brief: 2 threads give at least 1.8x the rate of 1
        speedup = two["chute_img_s"] / one["chute_img_s"]
        targets.append(
            {"name": "2 threads >= 1.8x of 1", "value": round(speedup, 3), "target": 1.8, "met": speedup >= 1.8}
        )
    args.json.write_text(json.dumps({"checks": checks, "figures": figures, "targets": targets}, indent=2))
    return 0


def _epochs(loader):
    while True:
        yield from loader


if __name__ == "__main__":
    sys.exit(main())
