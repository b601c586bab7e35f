"""chute doctor II: one verdict engine for every loader, fast-path awareness, stable verdicts, and a report
that never loses the diagnosis.

The planted cases here are the robust ones (a step that sleeps far longer than the loader needs; big JPEGs
with no step at all), so that the verdicts do not depend on this machine's load. bench/doctor_planted.py runs
every planted case, 5 times on each loader, and prints the table.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from conftest import jpeg_bytes, natural_image

import chute
from chute import _native
from chute.bench.pil_reference import as_torchvision
from chute.doctor import verdict as verdict_module

T = as_torchvision()


def test_doctor_thresholds_are_the_engines():
    assert verdict_module.INPUT_BOUND_STALL == _native.INPUT_BOUND_STALL == 0.10


def test_engine_diagnose_on_given_figures():
    figures = {
        "samples": 1000,
        "samples_delivered": 1000,
        "batches": 10,
        "elapsed_s": 10,
        "wait_s": 5,
        "consumer_s": 5,
        "read_s": 1,
        "decode_s": 12,
        "transform_s": 4,
        "worker_cpu_s": 17,
        "worker_idle_s": 8,
        "threads": 2,
        "active_threads": 2,
        "prefetch": 2,
        "cores": 2,
        "process_cpu_s": 19.5,
    }
    # Idle workers with every core busy: the busiest stage, never "prefetch".
    assert _native.diagnose(figures)["limit"] == "decode"
    assert _native.diagnose({**figures, "process_cpu_s": 12})["limit"] == "prefetch"
    assert _native.diagnose({**figures, "worker_cpu_s": 9, "worker_idle_s": 0})["limit"] == "cores"
    assert _native.diagnose({**figures, "wait_s": 0.1})["bound"] == "consumer"


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory):
    """1600x1200 JPEGs: decode is most of each sample's cost."""
    root = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(1)
    images = [jpeg_bytes(natural_image(rng, 1600, 1200), quality=95) for _ in range(3)]
    for c in range(2):
        (root / f"class_{c}").mkdir()
        for i in range(40):
            (root / f"class_{c}" / f"{i:03d}.jpg").write_bytes(images[(c + i) % 3])
    return root


def _stage_of(limit: str) -> str:
    return {"storage": "read"}.get(limit, limit)


def test_chute_loader_verdict_agrees_with_its_stats(big_folder):
    loader = chute.Loader(chute.ImageFolder(big_folder), batch_size=8, transforms=[chute.CenterCrop(224)])
    d = chute.doctor(loader, steps=4, warmup=2, storage=False)
    s = d.run.loader_stats
    assert s["bound"] == "input" and d.verdict.bound == "loader"
    assert d.verdict.stage == _stage_of(s["limit"]), (d.verdict.headline, s["verdict"])
    assert any("chute's verdict (loader.stats())" in e for e in d.verdict.evidence)


def test_fast_path_dataloader_is_diagnosed_as_chute_and_compared_with_torch(big_folder):
    dataset = T.ImageFolder(str(big_folder), transform=T.Compose([T.CenterCrop(224), T.PILToTensor()]))
    loader = chute.DataLoader(dataset, batch_size=8, num_workers=2)
    d = chute.doctor(loader, steps=3, warmup=1, storage=False)
    print(d)
    assert d.dataloader.path == "fast:imagefolder" and d.dataloader.num_workers_running == 0
    assert d.profile is None  # dataset[i] never runs on the fast path: its PIL path is not profiled
    s = d.run.loader_stats
    assert s is not None and s["samples"] > 0 and s["bound"] in ("input", "consumer")
    text = str(d)
    assert "DataLoader workers used" not in text and "shared memory" not in text
    assert "native fast path (fast:imagefolder)" in text and "none run" in text
    labels = [r.label for r in d.comparisons]
    assert labels == ["torch DataLoader num_workers=2"], labels  # the alternative, not chute against itself


def test_consumer_bound_verdict_is_stable_with_its_interval(tiny_folder):
    verdicts = []
    for _ in range(2):
        loader = chute.Loader(chute.ImageFolder(tiny_folder), batch_size=4, transforms=[chute.CenterCrop(32)])
        d = chute.doctor(loader, lambda batch: time.sleep(0.1), steps=6, warmup=2, storage=False)
        lo, hi = d.run.stall_interval()
        assert lo <= d.run.stall_fraction <= hi
        assert any("confidence interval" in e and "measured batches" in e for e in d.verdict.evidence)
        verdicts.append((d.verdict.bound, d.verdict.stage))
    assert verdicts == [("consumer", "step")] * 2


class _Straddling:
    """Batches whose wait alternates around the threshold: 5% and 15% of each step's time."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            time.sleep(0.0005 if i % 2 else 0.0015)
            yield torch.zeros(2)


def test_an_unsettled_stall_measures_more_batches_up_to_max_steps():
    d = chute.doctor(
        _Straddling(200), lambda b: time.sleep(0.01), steps=6, warmup=1, max_steps=30, storage=False, compare=False
    )
    # The interval straddled 10% after 6 batches, so the doctor measured on, 6 at a time, up to 30.
    assert len(d.run.measured) == 30 or d.run.settled(verdict_module.INPUT_BOUND_STALL)
    assert len(d.run.measured) > 6 or d.run.settled(verdict_module.INPUT_BOUND_STALL)
    if not d.run.settled(verdict_module.INPUT_BOUND_STALL):
        assert d.verdict.bound == "borderline" and "95% interval" in d.verdict.headline


def test_report_without_matplotlib_keeps_the_diagnosis(folder, tmp_path):
    code = """
import sys
sys.modules["matplotlib"] = None  # what `import matplotlib` meets where it is not installed
import chute
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(32)])
d = chute.doctor(loader, steps=3, warmup=1, storage=False, report=sys.argv[2])
print("NOTES", d.notes)
"""
    report = tmp_path / "r.html"
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(report)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "written without plots" in out.stdout
    html = report.read_text()
    assert "matplotlib, which is not installed" in html and "verdict" in html and "<img" not in html
    text = report.with_suffix(".txt").read_text()
    assert "verdict" in text


def test_unwritable_report_folder_fails_before_measuring(folder, tmp_path):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(32)])
    with pytest.raises(ValueError, match="not a writable folder"):
        chute.doctor(loader, steps=3, report=tmp_path / "missing" / "r.html")
    assert loader.stats()["batches"] == 0  # nothing was measured
