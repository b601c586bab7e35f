"""The most a DCT-scaled decode can save on the bench's large originals, and so what decode='reduced' can
buy at a given reducing_gap: the bound behind docs/DECODE.md's "Why the gain is bounded".

    .venv/bin/python bench/entropy_bound.py [--large 32] [--size 256] [--gap 3]

Per image (the first --large of chute/bench/dataset.py's large originals, shorter side 1000-2000 px), the
process CPU time of a libjpeg-turbo decode through Pillow, median of 5 repeats: whole; at 1/2 and at 1/8 (the
entropy decode plus the least inverse-DCT, upsampling and colour work libjpeg can do). With Pillow's
reducing_gap semantics, an image is reduced by 2**k only while its shorter side / 2**k stays >= gap * size,
so at --gap 3 and --size 256 only shorter sides >= 1536 px are reduced, by 2. Printed: the decode-only
speed-up at that gap; the same if every reduced image cost only its 1/8 decode (no DCT scale does better);
and if reduced images cost nothing.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from pathlib import Path

from PIL import Image

from chute.bench.dataset import ensure_large_dataset


def decode_cpu(data: bytes, scale: int) -> float:
    """Median process CPU seconds of decoding ``data`` at 1/scale (Pillow's draft, libjpeg's DCT scaling)."""
    times = []
    for _ in range(5):
        start = time.process_time()
        image = Image.open(io.BytesIO(data))
        if scale > 1:
            image.draft("RGB", (image.width // scale, image.height // scale))
        image.load()
        times.append(time.process_time() - start)
    return statistics.median(times)


def reduction(shorter: int, size: int, gap: float) -> int:
    """Pillow's draft factor for a resize of the shorter side to ``size`` with ``reducing_gap=gap``."""
    scale = 1
    while scale < 8 and shorter // (scale * 2) >= gap * size:
        scale *= 2
    return scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--large", type=int, default=32)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--gap", type=float, default=3.0)
    args = parser.parse_args()
    root = ensure_large_dataset(progress=False)  # the same 64 as bench/reduced_decode.py
    rows = []
    for path in sorted(Path(root).rglob("*.jpg"))[: args.large]:
        data = path.read_bytes()
        width, height = Image.open(io.BytesIO(data)).size
        scale = reduction(min(width, height), args.size, args.gap)
        rows.append((scale, decode_cpu(data, 1), decode_cpu(data, scale), decode_cpu(data, 8)))
    whole = sum(r[1] for r in rows)
    kept = sum(r[1] for r in rows if r[0] == 1)
    reduced = [r for r in rows if r[0] > 1]
    print(f"{len(rows)} images; reduced at gap {args.gap} for a shorter side of {args.size}: {len(reduced)}")
    print(f"decode CPU: whole {whole:.3f} s; at 1/8, {sum(r[3] for r in rows) / whole:.2f} of whole")
    print(f"decode-only speed-up at gap {args.gap}: {whole / (kept + sum(r[2] for r in reduced)):.2f}x")
    print(f"  if each reduced image cost only its 1/8 decode: {whole / (kept + sum(r[3] for r in reduced)):.2f}x")
    print(f"  if reduced images cost nothing: {whole / kept:.2f}x" if kept else "  (every image is reduced)")


if __name__ == "__main__":
    main()
