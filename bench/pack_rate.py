"""Pack rate: `chute pack` against `tar cf` writing the same files, interleaved, medians.

    .venv/bin/python bench/pack_rate.py [--root DIR] [--rounds 3] [--threads N]

DIR defaults to the `chute bench` dataset (2000 ImageNet-like JPEGs, generated once). Both write to a
temporary directory beside each other, with the source files in the page cache (hot). chute pack syncs its
files to disk before renaming them into place; plain `tar cf` does not, so `tar cf` + `sync FILE` is timed
too. Rates are payload MB/s (10^6 bytes of image files) and images per second.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import chute
from chute.bench.dataset import ensure_dataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    root = args.root or ensure_dataset()
    source = chute.ImageFolder(root)
    images = len(source)
    payload = sum(os.path.getsize(p) for p, _ in source.samples)
    for p, _ in source.samples:  # warm the page cache
        Path(p).read_bytes()
    times: dict[str, list[float]] = {"chute pack": [], "tar cf": [], "tar cf + sync": []}
    with tempfile.TemporaryDirectory(dir=Path(root).parent) as tmp:
        tmp = Path(tmp)
        for r in range(args.rounds):
            for name in times:
                out = tmp / f"out{r}"
                start = time.perf_counter()
                if name == "chute pack":
                    chute.pack(source, out, num_threads=args.threads)
                else:
                    subprocess.run(["tar", "cf", f"{out}.tar", "-C", str(Path(root).parent), Path(root).name], check=True)
                    if name.endswith("sync"):
                        subprocess.run(["sync", f"{out}.tar"], check=True)
                times[name].append(time.perf_counter() - start)
                shutil.rmtree(out, ignore_errors=True)
                Path(f"{out}.tar").unlink(missing_ok=True)
    print(f"{images} images, {payload / 1e6:.1f} MB, {args.threads} pack threads, median of {args.rounds} (hot cache)")
    base = statistics.median(times["tar cf"])
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"  {name:14s} {t:6.2f} s  {payload / 1e6 / t:8.1f} MB/s  {images / t:8.0f} img/s  "
              f"({base / t:.2f}x tar cf's rate)  runs: {', '.join(f'{x:.2f}' for x in ts)}")


if __name__ == "__main__":
    main()
