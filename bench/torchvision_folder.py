"""A torchvision ImageFolder pipeline through torch's DataLoader, and the same pipeline through chute's
fast path, in one run.

    python bench/torchvision_folder.py [--pipeline train|eval ...] [--v2] [--images 2000] [--batch-size 256]

The dataset is chute's bench set (python/chute/bench/dataset.py: ImageNet-like JPEGs, ~500x375, ~100 KB,
generated once and cached). The pipeline is torchvision's (real torchvision when it imports, else the PIL
stand-ins in python/tests/tv_standins.py, which mimic its classes and semantics):

* train: RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)
* eval:  Resize(256), CenterCrop(224), ToTensor(), Normalize(ImageNet)

With --v2 (real torchvision only), torchvision.transforms.v2 as its docs recommend, ToImage after the
geometry (on PIL images, the fast path is bit-exact) and ToDtype(float32, scale=True) in place of ToTensor:

* train: RandomResizedCrop(224), RandomHorizontalFlip(), ToImage(), ToDtype(float32, scale=True), Normalize
* eval:  Resize(256), CenterCrop(224), ToImage(), ToDtype(float32, scale=True), Normalize

The same dataset object, unchanged, goes to torch's DataLoader (num_workers 0, 1, 2; persistent workers)
and to chute.DataLoader (its ImageFolder fast path: checked). Files are read once first (warm page cache); each loader runs a warm-up epoch, then a timed
one. Printed: images/s of each, images per CPU-second (this process and its workers: per busy core, which
other jobs on a shared machine distort less), and the fast path's ratios to the best DataLoader.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def torchvision_modules():
    try:
        from torchvision import datasets, transforms
        return datasets, transforms, "torchvision"
    except (ImportError, OSError, RuntimeError):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
        import tv_standins
        return tv_standins, tv_standins, "PIL stand-ins for torchvision (python/tests/tv_standins.py)"


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


def epoch_rate(batches, pids=lambda: []) -> tuple[float, float]:
    """(images/s, images per CPU-second of this process and `pids()`): the second is per busy core, which
    other jobs on a shared machine distort far less than wall time."""
    procs = [os.getpid(), *pids()]
    cpu0, start = cpu_seconds(procs), time.perf_counter()
    images = 0
    for b in batches:
        images += len(b[1])
    wall, cpu = time.perf_counter() - start, cpu_seconds(procs) - cpu0
    return images / wall, images / cpu if cpu > 0 else float("nan")


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
    p.add_argument("--pipeline", choices=["train", "eval"], nargs="+", default=None,
                   help="default: train (with --v2: train and eval)")
    p.add_argument("--v2", action="store_true", help="torchvision.transforms.v2 pipelines (needs torchvision)")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--root", type=Path, default=None, help="dataset directory (default: chute's bench cache)")
    args = p.parse_args(argv)

    from chute.bench.dataset import ensure_dataset
    root = ensure_dataset(args.root, num_images=args.images)
    datasets, T, which = torchvision_modules()
    v2 = None
    if args.v2:
        if T.__name__ == "tv_standins":
            sys.exit("--v2 needs torchvision (it does not import here): run it in .venv-tv "
                     "(scripts/test_torchvision.sh sets that up)")
        from torchvision.transforms import v2
        which += " transforms.v2"
    names = args.pipeline or (["train", "eval"] if args.v2 else ["train"])
    ratios = {}
    for name in names:
        ratios[name] = run_pipeline(name, datasets.ImageFolder(root, transform=pipeline(name, T, v2)), which, args)
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
    print(f"{len(ds)} JPEGs in {root}; {name} pipeline via {which}; batch {args.batch_size}; "
          f"cores: {len(os.sched_getaffinity(0))}; torch {torch.__version__}")

    rates, per_cpu = {}, {}
    for w in args.workers:
        loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=w,
                            persistent_workers=w > 0)
        epoch_rate(loader)
        rates[w], per_cpu[w] = epoch_rate(loader, lambda: worker_pids(loader))
        print(f"  torch DataLoader num_workers={w:<2}            {rates[w]:8.0f} img/s  {per_cpu[w]:6.0f} img/CPU-s")
        del loader

    from chute import DataLoader as ChuteDataLoader
    loader = ChuteDataLoader(ds, batch_size=args.batch_size, shuffle=True)
    if loader.stats()["path"] != "fast:imagefolder":
        sys.exit(f"chute.DataLoader took the {loader.stats()['path']} path ({loader.stats()['fallback_reason']})")
    epoch_rate(loader)
    fast, fast_cpu = epoch_rate(loader)
    stats = loader._plan().stats()  # the native engine's counters, both epochs
    how = f"chute.DataLoader, {int(stats.get('threads', 0))} native threads"
    n = max(1, stats.get("samples", 0))
    print("  fast path, per sample in its worker threads (both epochs): "
          f"read {1e3 * stats['read_s'] / n:.2f} ms, decode {1e3 * stats['decode_s'] / n:.2f} ms, "
          f"transform {1e3 * stats['transform_s'] / n:.2f} ms; CPU {1e3 * stats['worker_cpu_s'] / n:.2f} ms")
    print(f"  chute fast path ({how}) {fast:8.0f} img/s  {fast_cpu:6.0f} img/CPU-s")
    best = max(rates, key=rates.get)
    best_cpu = max(per_cpu, key=per_cpu.get)
    print(f"ratio vs best DataLoader: {fast / rates[best]:.2f}x in images/s (num_workers={best}), "
          f"{fast_cpu / per_cpu[best_cpu]:.2f}x in images per CPU-second (num_workers={best_cpu})")
    return fast / rates[best]


if __name__ == "__main__":
    main()
