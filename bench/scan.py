"""Directory-scan benchmark: chute.ImageFolder against torchvision's ImageFolder listing (os.walk, or the
PIL peer's identical re-implementation when torchvision is absent) on a 100k-file tree.

    .venv/bin/python bench/scan.py [--files 100000] [--classes 100]

The tree (empty files: a scan reads names, not contents) is made once in a temporary directory. Each
scan runs 3 times, interleaved; medians are printed, hot dentry cache.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import chute
from chute.bench import torch_peer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--classes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for c in range(args.classes):
            (root / f"n{c:08d}").mkdir()
        for i in range(args.files):
            (root / f"n{i % args.classes:08d}" / f"img_{i:08d}.JPEG").touch()
        peer_name = "torchvision.datasets.ImageFolder" if torch_peer.uses_torchvision() else "PIL peer (os.walk)"
        times: dict[str, list[float]] = {"chute.ImageFolder": [], peer_name: []}
        for _ in range(3):
            t = time.perf_counter()
            n_chute = len(chute.ImageFolder(root))
            times["chute.ImageFolder"].append(time.perf_counter() - t)
            t = time.perf_counter()
            n_peer = len(torch_peer.make_peer_dataset(root))
            times[peer_name].append(time.perf_counter() - t)
        assert n_chute == n_peer == args.files
        med = {k: statistics.median(v) for k, v in times.items()}
        for name, seconds in med.items():
            print(f"{name:40s} {seconds * 1000:8.1f} ms for {args.files} files")
        print(f"ratio: chute is {med[peer_name] / med['chute.ImageFolder']:.1f}x faster")


if __name__ == "__main__":
    main()
