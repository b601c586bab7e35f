"""A torchvision ImageFolder pipeline through torch's DataLoader, and the same pipeline through chute's
fast path, in one run.

    python bench/torchvision_folder.py [--pipeline train|eval ...] [--v2] [--images 2000] [--batch-size 256]

The dataset is chute's bench set (python/chute/bench/dataset.py: ImageNet-like JPEGs, ~500x375, ~100 KB,
generated once and cached). The pipeline is torchvision's (real torchvision when it imports, else chute's
PIL reference of it, chute.bench.pil_reference, presented under torchvision's class names and modules):

* train: RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)
* eval:  Resize(256), CenterCrop(224), ToTensor(), Normalize(ImageNet)

With --v2 (real torchvision only), torchvision.transforms.v2 as its docs recommend, ToImage after the
geometry (on PIL images, the fast path is bit-exact) and ToDtype(float32, scale=True) in place of ToTensor:

* train: RandomResizedCrop(224), RandomHorizontalFlip(), ToImage(), ToDtype(float32, scale=True), Normalize
* eval:  Resize(256), CenterCrop(224), ToImage(), ToDtype(float32, scale=True), Normalize

The same dataset object, unchanged, goes to torch's DataLoader (num_workers 0, 1, 2; persistent workers)
and to chute.DataLoader (its ImageFolder fast path: checked). Files are read once first (warm page cache).
Every loader runs a warm-up epoch, then --rounds timed epochs, interleaved round by round with the others
(chute.bench.harness). Printed: the median images/s of each with its range, images per CPU-second (this
process and its workers: per busy core, which other jobs on a shared machine distort less), and the fast
path's ratios to the best DataLoader.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from chute.bench.harness import Contender, Timing, interleave, time_epoch

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def torchvision_modules():
    """torchvision's datasets and transforms (one namespace), whether it is real, and what to call it."""
    from chute.bench.pil_reference import as_torchvision, real_torchvision

    real = real_torchvision()
    if real is not None:
        return real, True, "torchvision"
    return as_torchvision(), False, "chute's PIL reference of torchvision (chute.bench.pil_reference)"


def cpu_seconds(pids) -> float:
    """User + system CPU time of these processes, all their threads (native ones included)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def worker_pids(loader) -> list[int]:
    it = getattr(loader, "_iterator", None)
    return [w.pid for w in getattr(it, "_workers", [])]


def epoch(loader) -> Timing:
    """One epoch, with the CPU time of this process and the loader's workers (per busy core, which other
    jobs on a shared machine distort far less than wall time)."""
    procs = [os.getpid(), *worker_pids(loader)]  # persistent workers: started by the warm-up epoch
    return time_epoch(loader, cpu_clock=lambda: cpu_seconds(procs))


def pipeline(name: str, T, v2) -> object:
    if v2 is not None:
        to_float = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
        if name == "train":
            return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), *to_float])
        return v2.Compose([v2.Resize(256), v2.CenterCrop(224), *to_float])
    if name == "train":
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pipeline",
        choices=["train", "eval"],
        nargs="+",
        default=None,
        help="default: train (with --v2: train and eval)",
    )
    p.add_argument("--v2", action="store_true", help="torchvision.transforms.v2 pipelines (needs torchvision)")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=3, help="timed epochs per loader, interleaved (median)")
    p.add_argument("--root", type=Path, default=None, help="dataset directory (default: chute's bench cache)")
    args = p.parse_args(argv)

    from chute.bench.dataset import ensure_dataset

    root = ensure_dataset(args.root, num_images=args.images)
    T, real, which = torchvision_modules()
    v2 = None
    if args.v2:
        if not real:
            sys.exit(
                "--v2 needs torchvision (it does not import here): run it in .venv-tv "
                "(scripts/test_torchvision.sh sets that up)"
            )
        from torchvision.transforms import v2

        which += " transforms.v2"
    names = args.pipeline or (["train", "eval"] if args.v2 else ["train"])
    ratios = {}
    for name in names:
        ratios[name] = run_pipeline(name, T.ImageFolder(root, transform=pipeline(name, T, v2)), which, args)
    if len(ratios) > 1:
        print("summary: " + ", ".join(f"{n} {r:.2f}x" for n, r in ratios.items()) + " (images/s vs best DataLoader)")
    load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    busy = " (above the core count: other processes took CPU time from both sides)" if load > cores else ""
    print(f"load average during the run: {load:.2f} on {cores} cores{busy}")


def run_pipeline(name: str, ds, which: str, args) -> float:
    """Both loaders over `ds`, side by side; returns the fast path's ratio to the best DataLoader (images/s)."""
    root = ds.root
    for path, _ in ds.samples:  # warm the page cache: both sides read from memory
        with open(path, "rb") as f:
            f.read()
    print(
        f"{len(ds)} JPEGs in {root}; {name} pipeline via {which}; batch {args.batch_size}; "
        f"cores: {len(os.sched_getaffinity(0))}; torch {torch.__version__}"
    )

    from chute import DataLoader as ChuteDataLoader

    fast_loader = ChuteDataLoader(ds, batch_size=args.batch_size, shuffle=True)
    if fast_loader.stats()["path"] != "fast:imagefolder":
        sys.exit(
            f"chute.DataLoader took the {fast_loader.stats()['path']} path ({fast_loader.stats()['fallback_reason']})"
        )
    torch_loaders = {
        w: DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=w, persistent_workers=w > 0)
        for w in args.workers
    }
    contenders = [
        Contender(f"torch DataLoader num_workers={w:<2}", lambda dl=dl: epoch(dl)) for w, dl in torch_loaders.items()
    ]
    fast_contender = Contender("chute fast path", lambda: epoch(fast_loader))
    try:
        interleave(contenders + [fast_contender], rounds=args.rounds)
    finally:
        for dl in torch_loaders.values():
            iterator = getattr(dl, "_iterator", None)
            if iterator is not None:
                iterator._shutdown_workers()

    def per_cpu(c: Contender) -> float:
        return c.summarize(lambda t: t.rate_per_cpu_second).median

    for c in contenders:
        print(f"  {c.name}            {c.rate:8.0f} img/s ({c.summary.range_text()})  {per_cpu(c):6.0f} img/CPU-s")
    stats = fast_loader._plan().stats()  # the native engine's counters, all epochs
    how = f"chute.DataLoader, {int(stats.get('threads', 0))} native threads"
    n = max(1, stats.get("samples", 0))
    print(
        "  fast path, per sample in its worker threads (all epochs): "
        f"read {1e3 * stats['read_s'] / n:.2f} ms, decode {1e3 * stats['decode_s'] / n:.2f} ms, "
        f"transform {1e3 * stats['transform_s'] / n:.2f} ms; CPU {1e3 * stats['worker_cpu_s'] / n:.2f} ms"
    )
    fast, fast_cpu = fast_contender.rate, per_cpu(fast_contender)
    print(
        f"  chute fast path ({how}) {fast:8.0f} img/s ({fast_contender.summary.range_text()})  "
        f"{fast_cpu:6.0f} img/CPU-s"
    )
    rates = {w: c.rate for w, c in zip(args.workers, contenders)}
    cpu_rates = {w: per_cpu(c) for w, c in zip(args.workers, contenders)}
    best = max(rates, key=rates.get)
    best_cpu = max(cpu_rates, key=cpu_rates.get)
    print(
        f"ratio vs best DataLoader: {fast / rates[best]:.2f}x in images/s (num_workers={best}), "
        f"{fast_cpu / cpu_rates[best_cpu]:.2f}x in images per CPU-second (num_workers={best_cpu})"
    )
    return fast / rates[best]


if __name__ == "__main__":
    main()
