"""ResNet-18 training fed by chute (device='cuda') vs the PyTorch DataLoader at its best num_workers.

Both feed the same model, optimiser and synthetic ImageNet-like JPEGs (chute.bench's dataset: ~500x375,
quality 90-96) with RandomResizedCrop(224) + flip + Normalize. For each loader it reports, after warm-up:
  img/s      images the training loop consumed per second of wall time;
  GPU idle   1 - (GPU time of the training steps) / wall time, where a step's GPU time is measured by CUDA
             events recorded on the compute stream around forward+backward+step (they complete only
             after any wait for the input, so waiting for data counts as idle).
The DataLoader's num_workers is swept first (a short run each), and its best setting is compared.
Runs are interleaved: DataLoader(best), chute, DataLoader(best), chute; the medians are reported.

    python bench/gpu_train.py [--images 2048] [--batch-size 128] [--steps 30] [--warmup 5]

Needs a CUDA GPU; without one it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn


def resnet18(num_classes: int) -> nn.Module:
    """torchvision's ResNet-18, or the same architecture written out when torchvision is absent."""
    try:
        import torchvision
        return torchvision.models.resnet18(num_classes=num_classes)
    except (ImportError, OSError, RuntimeError):
        pass

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    layers, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(512, num_classes))


class Trainer:
    def __init__(self, num_classes: int):
        self.model = resnet18(num_classes).cuda().to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = nn.CrossEntropyLoss()

    def run(self, loader, steps: int, warmup: int) -> tuple[float, float, int]:
        """(img/s, GPU-idle fraction, images) over `steps` steps after `warmup`; closes the loader."""
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
        return images / wall, max(0.0, 1 - busy / wall), images


def cycle(loader):
    """Endless batches: epochs back to back."""
    while True:
        yield from loader


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--workers", default="", help="DataLoader num_workers to sweep, e.g. 4,8,16 (default: by cores)")
    p.add_argument("--data", type=Path, default=None, help="ImageFolder tree (default: generated and cached)")
    args = p.parse_args()

    if not torch.cuda.is_available():
        print("gpu_train.py: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured",
              file=sys.stderr)
        return 2
    import chute
    from chute.bench.dataset import ensure_dataset
    from chute.bench.torch_peer import IMAGENET_MEAN, IMAGENET_STD, make_dataloader, uses_torchvision

    cores = len(os.sched_getaffinity(0))
    root = ensure_dataset(args.data or Path.home() / ".cache" / "chute" / f"gpu-train-{args.images}",
                          num_images=args.images, progress=False)
    trainer = Trainer(num_classes=10)
    bs = args.batch_size
    chute_transforms = [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
                        chute.Normalize(IMAGENET_MEAN, IMAGENET_STD)]

    def chute_loader():
        return chute.Loader(chute.ImageFolder(root), batch_size=bs, shuffle=True, drop_last=True,
                            transforms=chute_transforms, dtype=torch.float32, device="cuda",
                            memory_format=torch.channels_last)

    def torch_loader(workers: int):
        return make_dataloader(root, batch_size=bs, num_workers=workers, pin_memory=True)

    sweep = [int(w) for w in args.workers.split(",")] if args.workers else sorted(
        {max(1, cores // 4), max(1, cores // 2), cores})
    print(f"GPU: {torch.cuda.get_device_name()}; {cores} cores; batch {bs}; {args.images} JPEGs at {root}; "
          f"DataLoader peer: {'torchvision' if uses_torchvision() else 'PIL re-implementation'}")
    best, best_rate = sweep[0], 0.0
    for w in sweep:
        rate, idle, _ = trainer.run(torch_loader(w), max(10, args.steps // 2), args.warmup)
        print(f"  DataLoader num_workers={w:3d}: {rate:8.0f} img/s, GPU idle {idle:6.1%}")
        if rate > best_rate:
            best, best_rate = w, rate
    results = {"chute": [], f"DataLoader(num_workers={best})": []}
    for _ in range(2):
        results[f"DataLoader(num_workers={best})"].append(trainer.run(torch_loader(best), args.steps, args.warmup))
        results["chute"].append(trainer.run(chute_loader(), args.steps, args.warmup))
    print(f"\n  {'loader':28s} {'img/s':>9s} {'GPU idle':>9s}   (medians of 2 interleaved runs)")
    med = {}
    for name, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        idle = statistics.median(r[1] for r in runs)
        med[name] = (rate, idle)
        print(f"  {name:28s} {rate:9.0f} {idle:9.1%}")
    torch_rate = med[f"DataLoader(num_workers={best})"][0]
    print(f"TRAIN_RATIO chute/DataLoader img/s = {med['chute'][0] / torch_rate:.2f}; "
          f"GPU idle chute={med['chute'][1]:.1%} DataLoader={med[f'DataLoader(num_workers={best})'][1]:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
