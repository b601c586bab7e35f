"""Directory-scan benchmark: chute.ImageFolder against torchvision's ImageFolder listing (os.walk, or the
PIL peer's identical re-implementation when torchvision is absent) on a 100k-file tree.

    .venv/bin/python bench/scan.py [--files 100000] [--classes 100]

The tree (empty files: a scan reads names, not contents) is made once in a temporary directory. Each
scan runs 3 times, interleaved (chute.bench.harness); medians and ranges are printed, hot dentry cache.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import chute
from chute.bench import torch_peer
from chute.bench.harness import Contender, interleave, time_call


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
        ours = Contender("chute.ImageFolder", lambda: time_call(lambda: len(chute.ImageFolder(root))))
        peer = Contender(peer_name, lambda: time_call(lambda: len(torch_peer.make_peer_dataset(root))))
        interleave([ours, peer], rounds=3, warmup=0)
        assert all(t.items == args.files for c in (ours, peer) for t in c.timings)
        for c in (ours, peer):
            s = c.seconds
            print(
                f"{c.name:40s} {s.median * 1000:8.1f} ms for {args.files} files "
                f"(range {s.low * 1000:.1f}-{s.high * 1000:.1f} ms)"
            )
        print(f"ratio: chute is {peer.seconds.median / ours.seconds.median:.1f}x faster")


if __name__ == "__main__":
    main()
