"""The step-time cost of ``chute.DataLoader(pin_memory=True)`` with pinning in line and on the pin thread, on a
CPU-side proxy (no GPU needed): a stand-in accelerator, torch's ``pin_memory()`` replaced by a copy into reused
memory of the same size (what pinning costs the host: one pass over the batch), and a training step that keeps
the loop's thread busy elsewhere for ``--step-ms`` (a GPU step whose host thread waits on the device).

    python bench/pin_thread.py [--batch-size 256] [--side 224] [--steps 12] [--rounds 3] [--step-ms 100]

Contenders, interleaved round by round on one dataset (a TensorDataset of float32 images, the native tensor
path): ``in line`` pins on the loop's thread, as chute.DataLoader did before (and as torch's in-process
iterator does); ``pin thread`` is chute.DataLoader now (chute/dataloader/pinning.py). Prints, per contender, the
median step time (loop thread, from one batch to the next, the step included) and the median time spent in
``next()``, and the ratio of step times.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import TensorDataset


class InLine:
    """The old behaviour: the batch is pinned on the loop's thread, in the call that returns it."""

    def __init__(self, device):
        self.device = device

    def next(self, fetch):
        return torch.utils.data._utils.pin_memory.pin_memory(fetch(), self.device)

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass


class CopyAsPin:
    """One pass over the batch into reused memory: what torch's pin_memory() costs the host, without a GPU. Like
    torch's caching host allocator, blocks are reused (4 per shape, round robin: the loop here keeps no batch),
    so the copy does not fault in fresh pages each time."""

    def __init__(self):
        self.blocks: dict = {}

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        ring = self.blocks.setdefault((t.shape, t.dtype), [[torch.empty_like(t) for _ in range(4)], 0])
        out = ring[0][ring[1] % 4]
        ring[1] += 1
        return out.copy_(t)

    def __call__(self, data, device=None):
        return [self.copy(t) for t in data] if isinstance(data, list) else self.copy(data)


def epoch(dataset, batch_size: int, steps: int, step_s: float) -> tuple[list[float], list[float]]:
    from chute import DataLoader

    loader = DataLoader(dataset, batch_size=batch_size, pin_memory=True)
    steps_s, next_s = [], []
    it = iter(loader)
    last = time.perf_counter()
    for k in range(steps + 1):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        if k > 0:  # the first batch includes starting the epoch
            next_s.append(t1 - t0)
            steps_s.append(t1 - last)
        last = t1
        del batch
        time.sleep(step_s)  # the training step: the loop's thread waits on the device
    del it
    return steps_s, next_s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--side", type=int, default=224)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=100.0)
    args = p.parse_args()

    import chute.dataloader.iterator as iterator

    torch.accelerator.is_available = lambda: True  # torch's iterator base decides to pin
    torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
    torch.utils.data._utils.pin_memory.pin_memory = CopyAsPin()
    n = args.batch_size * (args.steps + 2)
    images = torch.rand(n, 3, args.side, args.side)
    dataset = TensorDataset(images, torch.arange(n))
    mb = args.batch_size * 3 * args.side**2 * 4 / 1e6
    print(f"batch {args.batch_size} x 3 x {args.side}^2 float32 = {mb:.0f} MB; step {args.step_ms:.0f} ms")

    real = iterator.pin_ahead
    contenders = {
        "in line": lambda it: InLine(it._pin_memory_device) if it._pin_memory else None,
        "pin thread": real,
    }
    results = {name: ([], []) for name in contenders}
    for _ in range(args.rounds):
        for name, factory in contenders.items():
            iterator.pin_ahead = factory
            s, nx = epoch(dataset, args.batch_size, args.steps, args.step_ms / 1e3)
            results[name][0].extend(s)
            results[name][1].extend(nx)
    iterator.pin_ahead = real
    for name, (s, nx) in results.items():
        print(
            f"  {name:<11} step {1e3 * statistics.median(s):7.1f} ms  in next() {1e3 * statistics.median(nx):7.1f} ms"
            f"  (median of {len(s)} steps)"
        )
    before, after = (statistics.median(results[k][0]) for k in contenders)
    print(f"PIN_STEP_RATIO pin_thread/in_line={after / before:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
