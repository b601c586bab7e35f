"""Bounded memory: 10 epochs over an ImageNet-like folder (500x375 JPEGs, two of them corrupt, skipped)
with RandomResizedCrop(224) + flip + Normalize to float32, batch 32, prefetch 2. Peak RSS above the
process's RSS before the loader must stay within the prefetch budget (the ring: prefetch + 2 batch
buffers) plus 100 MB, and be flat from the second epoch on.

    python python/tests/test_soak.py [EPOCHS]     # prints RSS per epoch
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import jpeg_bytes, natural_image

HERE = Path(__file__).resolve().parent
SAMPLES, DISTINCT = 512, 16
OVERHEAD_MB = 100  # the brief's target: peak RSS at most the prefetch budget + 100 MB
FLAT_MB = 4  # growth allowed between the peaks of epoch 2 and any later epoch


def make_dataset(root: Path) -> Path:
    rng = np.random.default_rng(0)
    originals = []
    for i in range(DISTINCT):
        path = root / f"orig_{i}.jpg"
        path.write_bytes(jpeg_bytes(natural_image(rng, 500, 375), quality=int(rng.integers(90, 97))))
        originals.append(path)
    for i in range(SAMPLES):
        d = root / "train" / f"n{i % 8:02d}"
        d.mkdir(parents=True, exist_ok=True)
        if i in (100, 333):  # corrupt: truncated copies, skipped every epoch
            (d / f"{i:04d}.jpg").write_bytes(originals[0].read_bytes()[:5000])
        else:
            os.link(originals[i % DISTINCT], d / f"{i:04d}.jpg")
    return root / "train"


def soak(root: Path, epochs: int = 10) -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE / "soak_child.py"), str(root), str(epochs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(r: dict) -> str:
    base = r["baseline_kb"] / 1024
    lines = [
        f"RSS before the loader: {base:.0f} MB; prefetch budget (ring): {r['ring_bytes'] / 2**20:.0f} MB; "
        f"limit on peak - before: {r['ring_bytes'] / 2**20 + OVERHEAD_MB:.0f} MB",
        "| epoch | samples | peak RSS (MB) | peak - before (MB) | RSS at end (MB) | s |",
        "|---|---|---|---|---|---|",
    ]
    for e in r["epochs"]:
        lines.append(
            f"| {e['epoch'] + 1} | {e['samples']} | {e['peak_kb'] / 1024:.1f} | "
            f"{(e['peak_kb'] - r['baseline_kb']) / 1024:.1f} | {e['end_kb'] / 1024:.1f} | {e['seconds']:.1f} |"
        )
    return "\n".join(lines)


@pytest.mark.slow
def test_rss_is_bounded_by_the_prefetch_budget_and_flat_over_10_epochs(tmp_path):
    r = soak(make_dataset(tmp_path))
    print("\n" + table(r))
    epochs = r["epochs"]
    assert [e["samples"] for e in epochs] == [SAMPLES - 2] * 10 and r["errors"] == 20
    limit_kb = r["ring_bytes"] / 1024 + OVERHEAD_MB * 1024
    for e in epochs:
        assert e["peak_kb"] - r["baseline_kb"] <= limit_kb, table(r)
    second = epochs[1]["peak_kb"]
    assert max(e["peak_kb"] for e in epochs[1:]) - second <= FLAT_MB * 1024, table(r)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(table(soak(make_dataset(Path(tmp)), int(sys.argv[1]) if len(sys.argv) > 1 else 10)))
