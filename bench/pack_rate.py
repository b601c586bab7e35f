"""Pack rate: `chute pack` against `tar cf` writing the same files, interleaved, medians.

    .venv/bin/python bench/pack_rate.py [--root DIR] [--rounds 3] [--threads N]

DIR defaults to the `chute bench` dataset (2000 ImageNet-like JPEGs, generated once). Both write to a
temporary directory beside each other, with the source files in the page cache (hot). chute pack syncs its
files to disk before renaming them into place; plain `tar cf` does not, so `tar cf` + `sync FILE` is timed
too. Rates are payload MB/s (10^6 bytes of image files) and images per second; the three run interleaved,
round by round (chute.bench.harness).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import chute
from chute.bench.dataset import ensure_dataset
from chute.bench.harness import Contender, interleave, time_call


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
    with tempfile.TemporaryDirectory(dir=Path(root).parent) as tmp:
        outputs = (Path(tmp) / f"out{i}" for i in itertools.count())

        def chute_pack() -> int:
            chute.pack(source, next(outputs), num_threads=args.threads)
            return images

        def tar(sync: bool) -> int:
            out = f"{next(outputs)}.tar"
            subprocess.run(["tar", "cf", out, "-C", str(Path(root).parent), Path(root).name], check=True)
            if sync:
                subprocess.run(["sync", out], check=True)
            return images

        def measured(write):
            def measure():
                timing = time_call(write)
                for path in Path(tmp).iterdir():  # not timed: the written copy goes before the next
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
                return timing

            return measure

        contenders = [
            Contender("chute pack", measured(chute_pack)),
            Contender("tar cf", measured(lambda: tar(False))),
            Contender("tar cf + sync", measured(lambda: tar(True))),
        ]
        interleave(contenders, rounds=args.rounds, warmup=0)
    print(f"{images} images, {payload / 1e6:.1f} MB, {args.threads} pack threads, median of {args.rounds} (hot cache)")
    base = contenders[1].seconds.median
    for c in contenders:
        t = c.seconds.median
        print(
            f"  {c.name:14s} {t:6.2f} s  {payload / 1e6 / t:8.1f} MB/s  {images / t:8.0f} img/s  "
            f"({base / t:.2f}x tar cf's rate)  runs: {', '.join(f'{x.seconds:.2f}' for x in c.timings)}"
        )


if __name__ == "__main__":
    main()
