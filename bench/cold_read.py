"""Cold-cache read rate: every sample's bytes read once (no decode), ImageFolder against a packed copy of
it, each from a fresh process after dropping its files from the page cache, interleaved (chute.bench.harness),
medians.

    .venv/bin/python bench/cold_read.py PACKED_DIR [--root DIR] [--rounds 3] [--threads N]

DIR defaults to the `chute bench` dataset; PACKED_DIR is `chute pack DIR PACKED_DIR`. The files are
dropped with posix_fadvise(POSIX_FADV_DONTNEED) (no root needed; a file another process has mapped keeps
its pages, so nothing else should hold the dataset open). Samples are read on N threads (default: the
cores) in a shuffled order, as a training epoch reads them, then in order. Hot-cache rates come from `chute bench
--source PACKED_DIR` ("read:" rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from chute.bench.harness import Contender, Timing, interleave

CHILD = r"""
import json, os, sys, time, random
import chute
from chute import _native
kind, path, threads, shuffle = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
files = ([p for p, _ in chute.ImageFolder(path).samples] if kind == "folder"
         else [str(p) for p in Path(path).iterdir()])
for f in files:
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
start = time.perf_counter()
source = chute.ImageFolder(path) if kind == "folder" else chute.open(path)
opened = time.perf_counter() - start
seconds, nbytes, failed = _native.read_all(source._native, threads, shuffle)
print(json.dumps({"open_s": opened, "read_s": seconds, "samples": len(source) - failed, "bytes": nbytes}))
""".replace("import json, os", "from pathlib import Path\nimport json, os")


def measure(kind: str, path: Path, threads: int, shuffle: bool) -> Timing:
    """One cold read in a fresh process: samples over open + read seconds (open_s and bytes in extra)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(path), str(threads), str(int(shuffle))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    r = json.loads(out)
    return Timing(r["samples"], r["open_s"] + r["read_s"], extra={"open_s": r["open_s"], "bytes": r["bytes"]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("packed", type=Path)
    parser.add_argument("--root", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    if args.root is None:
        from chute.bench.dataset import ensure_dataset

        args.root = ensure_dataset()
    for shuffle in (True, False):
        report(args, shuffle)


def report(args: argparse.Namespace, shuffle: bool) -> None:
    contenders = [
        Contender("ImageFolder", lambda: measure("folder", args.root, args.threads, shuffle)),
        Contender("packed", lambda: measure("packed", args.packed, args.threads, shuffle)),
    ]
    interleave(contenders, rounds=args.rounds, warmup=0)  # cold on purpose: each run drops the cache first
    print(
        f"cold page cache, {'shuffled' if shuffle else 'sequential'} order, {args.threads} threads, median of "
        f"{args.rounds} (open = directory scan or index open)"
    )
    rates = {}
    for c in contenders:
        rates[c.name] = c.rate
        mb = c.summarize(lambda t: t.extra["bytes"] / 1e6 / t.seconds).median
        print(
            f"  {c.name:12s} open {c.summarize(lambda t: t.extra['open_s']).median * 1000:7.1f} ms  "
            f"open+read {c.seconds.median:6.2f} s  {rates[c.name]:8.0f} img/s  {mb:7.1f} MB/s  "
            f"runs: {', '.join(f'{t.seconds:.2f}' for t in c.timings)}"
        )
    print(f"  packed / ImageFolder: {rates['packed'] / rates['ImageFolder']:.2f}x")


if __name__ == "__main__":
    main()
