"""ResNet-50 training steps (channels_last, bf16 autocast, SGD) on generated photos, fed four ways:
  chute device='cuda'          batches decoded into pinned buffers, copied as uint8 on chute's stream, converted
                               to bf16 and normalised on the GPU
  chute.Loader pin_memory      float32 pinned CPU batches (torch's blocks), the loop's own .cuda(non_blocking=True)
  chute.DataLoader pin_memory  the drop-in on torchvision's ImageFolder (its native fast path), pinned on its pin
                               thread, the loop's own .cuda(non_blocking=True)
  torch DataLoader             torchvision ImageFolder + transforms, pin_memory, at its best num_workers of a
                               short sweep (cores/2, cores)
Each run does ``--warmup`` steps (cudnn's autotuner settles; >= 10) and then reports, over ``--steps`` steps:
  img/s      images the loop consumed per second of wall time;
  GPU busy   (GPU time of the training steps) / wall time, a step's GPU time measured by CUDA events recorded on
             the compute stream around forward+backward+step (they complete only after any wait for the input,
             so waiting for data counts as idle).

    python bench/gpu_train.py --data DIR --json OUT [--batch-size 256] [--steps 25] [--warmup 15] [--smoke]

``--smoke`` runs the same code on the CPU with a tiny model and no CUDA events (the dry run); its figures mean
nothing. Part of bench/gpu_check.sh.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.nn as nn

import chute
from chute.bench.torch_peer import IMAGENET_MEAN, IMAGENET_STD, make_dataloader, make_peer_dataset


def model(smoke: bool, num_classes: int) -> nn.Module:
    if smoke:  # a few convolutions: the loop's code, not a measurement
        return nn.Sequential(
            nn.Conv2d(3, 8, 7, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes)
        )
    import torchvision

    return torchvision.models.resnet50(num_classes=num_classes)


class Trainer:
    def __init__(self, smoke: bool, num_classes: int):
        self.smoke = smoke
        self.device = torch.device("cpu" if smoke else "cuda")
        self.model = model(smoke, num_classes).to(self.device, memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = nn.CrossEntropyLoss()

    def run(self, loader, steps: int, warmup: int) -> dict:
        """img/s and GPU busy over ``steps`` steps after ``warmup``; closes the loader."""
        try:
            return self._run(cycle(loader), steps, warmup)
        finally:
            if hasattr(loader, "close"):
                loader.close()

    def _sync(self) -> None:
        if not self.smoke:
            torch.cuda.synchronize()

    def _run(self, it, steps: int, warmup: int) -> dict:
        events, images, wait = [], 0, 0.0
        for i in range(warmup + steps):
            if i == warmup:
                self._sync()
                start = time.perf_counter()
            t0 = time.perf_counter()
            x, y = next(it)
            if i >= warmup:
                wait += time.perf_counter() - t0
            # A CPU batch (pinned or not) is copied by the loop itself, as in a real training loop.
            x = x.to(self.device, non_blocking=True).to(memory_format=torch.channels_last)
            y = y.to(self.device, non_blocking=True)
            if not self.smoke:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                loss = self.loss(self.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            if not self.smoke:
                end.record()
                if i >= warmup:
                    events.append((begin, end))
            if i >= warmup:
                images += x.shape[0]
        self._sync()
        wall = time.perf_counter() - start
        busy = sum(b.elapsed_time(e) for b, e in events) / 1e3 / wall if events else None
        return {
            "img_s": round(images / wall, 1),
            "gpu_busy": None if busy is None else round(min(1.0, busy), 4),
            "loop_wait_s_per_step": round(wait / steps, 5),
            "steps": steps,
        }


def cycle(loader):
    """Endless batches: epochs back to back."""
    while True:
        yield from loader


def main() -> int:
    from gpu_check import step_arguments, without_gpu

    p = step_arguments(__doc__, "a tiny model on the CPU")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=15)
    args = p.parse_args()
    if without_gpu(args, "gpu_train.py"):
        return 2
    cores = chute._native.available_cores()
    classes = len([d for d in args.data.iterdir() if d.is_dir()])
    trainer = Trainer(args.smoke, classes)
    bs, warmup, steps = args.batch_size, args.warmup if args.smoke else max(10, args.warmup), args.steps
    norm = chute.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    transforms = [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(), norm]
    common = dict(batch_size=bs, shuffle=True, drop_last=True, transforms=transforms, memory_format=torch.channels_last)

    def chute_cuda():
        return chute.Loader(
            chute.ImageFolder(args.data), dtype=torch.bfloat16, device="sim" if args.smoke else "cuda", **common
        )

    def chute_pinned():
        return chute.Loader(chute.ImageFolder(args.data), dtype=torch.float32, pin_memory=not args.smoke, **common)

    def dropin():
        return chute.DataLoader(make_peer_dataset(args.data), batch_size=bs, shuffle=True, drop_last=True,
                                num_workers=cores, pin_memory=not args.smoke, persistent_workers=True)  # fmt: skip

    def dataloader(workers: int):
        return make_dataloader(args.data, batch_size=bs, num_workers=workers, pin_memory=not args.smoke)

    name = "GPU: " + (torch.cuda.get_device_name() if not args.smoke else "none (smoke: tiny model on the CPU)")
    print(
        f"{name}; {cores} cores; ResNet-50 bf16 channels_last; batch {bs}; {warmup} warm-up + {steps} steps per run",
        flush=True,
    )
    runs: dict = {}
    sweep = sorted({max(1, cores // 2), cores})
    best, best_rate = sweep[0], -1.0
    for w in sweep:  # a short run each: the best worker count for the full one
        r = trainer.run(dataloader(w), max(3, steps // 3), warmup)
        print(f"  DataLoader num_workers={w:3d} (short run): {r['img_s']:8.0f} img/s", flush=True)
        if r["img_s"] > best_rate:
            best, best_rate = w, r["img_s"]
    feeds = {
        "chute device='cuda'": chute_cuda,
        "chute.Loader pin_memory": chute_pinned,
        f"chute.DataLoader pin_memory (num_workers={cores})": dropin,
        f"torch DataLoader (num_workers={best})": lambda: dataloader(best),
    }
    print(f"\n  {'loader':44s} {'img/s':>9s} {'GPU busy':>9s} {'loop wait':>10s}", flush=True)
    for label, make in feeds.items():
        t0 = time.perf_counter()
        r = trainer.run(make(), steps, warmup)
        r["wall_s"] = round(time.perf_counter() - t0, 1)
        runs[label] = r
        busy = "n/a" if r["gpu_busy"] is None else f"{r['gpu_busy']:.1%}"
        print(f"  {label:44s} {r['img_s']:9.0f} {busy:>9s} {1e3 * r['loop_wait_s_per_step']:8.1f}ms", flush=True)
    dl = runs[f"torch DataLoader (num_workers={best})"]
    cuda = runs["chute device='cuda'"]
    checks = [{"name": "train", "status": "PASS", "detail": "; ".join(
        f"{k}: {v['img_s']:.0f} img/s" + ("" if v["gpu_busy"] is None else f", GPU busy {v['gpu_busy']:.1%}")
        for k, v in runs.items())}]  # fmt: skip
    targets = []
    if cuda["gpu_busy"] is not None:  # README: the GPU never waits on data when the host pipeline is faster
        targets.append({"name": "chute device='cuda' keeps the GPU >= 95% busy", "value": cuda["gpu_busy"], "target": 0.95,
                        "met": cuda["gpu_busy"] >= 0.95})  # fmt: skip
    figures = {"gpu": name, "cores": cores, "batch_size": bs, "warmup": warmup, "steps": steps, "runs": runs,
               "dataloader_best_workers": best,
               "chute_cuda_over_dataloader": round(cuda["img_s"] / dl["img_s"], 3) if dl["img_s"] else None}  # fmt: skip
    args.json.write_text(json.dumps({"checks": checks, "figures": figures, "targets": targets}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
