"""ResNet-50 training (channels_last, bf16 autocast) on generated JPEGs, fed three ways:
  chute, device='cuda'       batches decoded into pinned buffers, copied on chute's stream, normalised on GPU;
  chute, CPU + pin_memory    float32 pinned CPU batches, the loop's own .cuda(non_blocking=True);
  torch DataLoader           torchvision ImageFolder + transforms, pin_memory, at its best num_workers.
Each run does >= 20 warm-up steps (cudnn's autotuner settles) and then reports, over the measured steps:
  img/s      images the training loop consumed per second of wall time;
  GPU busy   (GPU time of the training steps) / wall time, a step's GPU time measured by CUDA events recorded
             on the compute stream around forward+backward+step (they complete only after any wait for the
             input, so waiting for data counts as idle).
Then, as the budget allows, the loader threads (chute num_threads, DataLoader num_workers) each needs to keep
the GPU >= 95% busy: the smallest of a doubling sweep that does.

    python bench/gpu_train.py [--images 2048] [--batch-size 128] [--steps 30] [--warmup 20] [--budget 200]
                              [--json out.json]

Needs a CUDA GPU and torchvision; without a GPU it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn


def resnet50(num_classes: int) -> nn.Module:
    import torchvision

    return torchvision.models.resnet50(num_classes=num_classes)


class Trainer:
    def __init__(self, num_classes: int):
        self.model = resnet50(num_classes).cuda().to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = nn.CrossEntropyLoss()

    def run(self, loader, steps: int, warmup: int) -> tuple[float, float, int]:
        """(img/s, GPU-busy fraction, images) over `steps` steps after `warmup`; closes the loader."""
        try:
            return self._run(cycle(loader), steps, warmup)
        finally:
            if hasattr(loader, "close"):
                loader.close()

    def _run(self, it, steps: int, warmup: int) -> tuple[float, float, int]:
        events, images = [], 0
        for i in range(warmup + steps):
            if i == warmup:
                torch.cuda.synchronize()
                start = time.perf_counter()
            x, y = next(it)
            # The DataLoader yields pinned CPU tensors: its copy is the user's, as in a real loop.
            x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
            y = y.cuda(non_blocking=True)
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = self.loss(self.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            end.record()
            if i >= warmup:
                events.append((begin, end))
                images += x.shape[0]
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        busy = sum(b.elapsed_time(e) for b, e in events) / 1e3
        return images / wall, min(1.0, busy / wall), images


def cycle(loader):
    """Endless batches: epochs back to back."""
    while True:
        yield from loader


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--budget", type=float, default=200, help="seconds for everything; sweeps stop when it is spent")
    p.add_argument("--json", type=Path, default=None, help="write the figures there")
    p.add_argument("--data", type=Path, default=None, help="ImageFolder tree (default: generated and cached)")
    args = p.parse_args()
    began = time.perf_counter()

    if not torch.cuda.is_available():
        print("gpu_train.py: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured", file=sys.stderr)
        return 2
    import chute
    from chute.bench.dataset import ensure_dataset
    from chute.bench.torch_peer import IMAGENET_MEAN, IMAGENET_STD, make_dataloader

    cores = len(os.sched_getaffinity(0))
    root = ensure_dataset(
        args.data or Path.home() / ".cache" / "chute" / f"gpu-train-{args.images}",
        num_images=args.images,
        progress=False,
    )
    trainer = Trainer(num_classes=10)
    bs, warmup = args.batch_size, max(20, args.warmup)
    transforms = [
        chute.RandomResizedCrop(224),
        chute.RandomHorizontalFlip(),
        chute.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]

    def chute_cuda(threads="auto"):
        return chute.Loader(
            chute.ImageFolder(root),
            batch_size=bs,
            shuffle=True,
            drop_last=True,
            num_threads=threads,
            transforms=transforms,
            dtype=torch.bfloat16,
            device="cuda",
            memory_format=torch.channels_last,
        )

    def chute_pinned(threads="auto"):
        return chute.Loader(
            chute.ImageFolder(root),
            batch_size=bs,
            shuffle=True,
            drop_last=True,
            num_threads=threads,
            transforms=transforms,
            dtype=torch.float32,
            pin_memory=True,
            memory_format=torch.channels_last,
        )

    def dataloader(workers: int):
        return make_dataloader(root, batch_size=bs, num_workers=workers, pin_memory=True)

    def left() -> float:
        return args.budget - (time.perf_counter() - began)

    print(
        f"GPU: {torch.cuda.get_device_name()}; {cores} cores; ResNet-50 bf16 channels_last; batch {bs}; "
        f"{args.images} JPEGs at {root}; {warmup} warm-up steps per run"
    )
    figures: dict = {
        "gpu": torch.cuda.get_device_name(),
        "cores": cores,
        "batch_size": bs,
        "warmup": warmup,
        "steps": args.steps,
        "runs": {},
        "threads_for_95pct_busy": {},
    }
    short = max(10, args.steps // 3)
    sweep = sorted({max(1, cores // 4), max(1, cores // 2), cores})
    dl_busy = {}
    best, best_rate = sweep[0], 0.0
    for w in sweep:
        rate, busy, _ = trainer.run(dataloader(w), short, warmup)
        dl_busy[w] = busy
        print(f"  DataLoader num_workers={w:3d}: {rate:8.0f} img/s, GPU busy {busy:6.1%}")
        if rate > best_rate:
            best, best_rate = w, rate
    runs = {
        "chute device='cuda'": lambda: chute_cuda(),
        "chute CPU + pin_memory": lambda: chute_pinned(),
        f"DataLoader(num_workers={best})": lambda: dataloader(best),
    }
    print(f"\n  {'loader':30s} {'img/s':>9s} {'GPU busy':>9s}")
    for name, make in runs.items():
        rate, busy, _ = trainer.run(make(), args.steps, warmup)
        figures["runs"][name] = {"img_s": round(rate, 1), "gpu_busy": round(busy, 4)}
        print(f"  {name:30s} {rate:9.0f} {busy:9.1%}")
    r = figures["runs"]
    dl = r[f"DataLoader(num_workers={best})"]
    print(
        f"TRAIN chute_cuda/DataLoader img/s = {r[chute_cuda_name]['img_s'] / dl['img_s']:.2f}; "
        f"chute_pinned/DataLoader = {r['chute CPU + pin_memory']['img_s'] / dl['img_s']:.2f}; GPU busy "
        f"cuda={r[chute_cuda_name]['gpu_busy']:.1%} pinned={r['chute CPU + pin_memory']['gpu_busy']:.1%} "
        f"DataLoader={dl['gpu_busy']:.1%}"
    )

    # The threads each loader needs for >= 95% GPU busy: a doubling sweep, as far as the budget goes.
    counts = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k < cores} | {cores})
    for name, make in (
        ("chute device='cuda'", chute_cuda),
        ("chute CPU + pin_memory", chute_pinned),
        ("DataLoader", dataloader),
    ):
        found = None
        for k in counts:
            if left() < 25:
                found = found or "budget spent"
                break
            busy = dl_busy[k] if name == "DataLoader" and k in dl_busy else trainer.run(make(k), short, warmup)[1]
            print(f"  {name:24s} {k:3d} threads: GPU busy {busy:6.1%}")
            if busy >= 0.95:
                found = k
                break
        figures["threads_for_95pct_busy"][name] = found if found is not None else f"> {counts[-1]}"
    print(
        "THREADS for >= 95% GPU busy: " + ", ".join(f"{k}: {v}" for k, v in figures["threads_for_95pct_busy"].items())
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


chute_cuda_name = "chute device='cuda'"


if __name__ == "__main__":
    sys.exit(main())
