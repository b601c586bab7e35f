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
    # Workers short of CPU: "cores" when another process had the cores (the process used 1.1 of 2), the
    # busiest stage when this process kept its cores busy itself (1.95 of 2).
    short = {**figures, "worker_cpu_s": 9, "worker_idle_s": 0}
    assert _native.diagnose({**short, "process_cpu_s": 11})["limit"] == "cores"
    assert _native.diagnose(short)["limit"] == "decode"
    assert _native.diagnose({**figures, "wait_s": 0.1})["bound"] == "consumer"


def _snapshot(**change):
    """A loader.stats() dict of an input-bound engine with idle workers and a core to spare; ``change``
    replaces figures."""
    s = {
        "samples": 100,
        "samples_delivered": 100,
        "batches": 10,
        "elapsed_s": 10.0,
        "process_cpu_s": 10.0,
        "wait_s": 5.0,
        "consumer_s": 5.0,
        "read_s": 1.0,
        "decode_s": 6.0,
        "transform_s": 1.0,
        "worker_cpu_s": 8.0,
        "worker_idle_s": 4.0,
        "threads": 2,
        "active_threads": 2,
        "prefetch": 2,
        "max_prefetch": 40,
        "auto_prefetch": True,
        "auto_threads": True,
        "cores": 2,
        "batch_buffers": 4,
        "batch_buffer_bytes": 1 << 20,
        "mean_ready_batches": 0.5,
    }
    s.update(change)
    return s


def test_stats_since_differences_counters_and_keeps_settings_as_at_the_end():
    """Between two snapshots only the engine's counters are differenced: a setting such as max_prefetch
    differenced to 0 made auto prefetch below its cap look capped, and the verdict said "prefetch"."""
    from chute.doctor.measure import stats_since

    before = _snapshot()
    after = _snapshot(**{k: 2 * v for k, v in before.items() if k in _COUNTED})
    after["prefetch"] = 3  # auto prefetch grew meanwhile
    out = stats_since(before, after)
    for k in _COUNTED:
        assert out[k] == before[k], k
    assert out["max_prefetch"] == 40 and out["prefetch"] == 3 and out["cores"] == 2 and out["threads"] == 2
    assert out["batch_buffers"] == 4 and out["mean_ready_batches"] == 0.5 and out["auto_prefetch"] is True
    # idle workers (33%), 1 of 2 cores to spare, auto prefetch below its cap: the autotuner grows it, the
    # busiest stage is the limit; set by hand (max_prefetch = prefetch), the window is
    assert out["bound"] == "input" and out["limit"] == "decode", out["verdict"]
    by_hand = stats_since(
        _snapshot(auto_prefetch=False, max_prefetch=2),
        _snapshot(auto_prefetch=False, max_prefetch=2, **{k: 2 * v for k, v in before.items() if k in _COUNTED}),
    )
    assert by_hand["limit"] == "prefetch", by_hand["verdict"]


_COUNTED = (
    "samples",
    "samples_delivered",
    "batches",
    "elapsed_s",
    "process_cpu_s",
    "wait_s",
    "consumer_s",
    "read_s",
    "decode_s",
    "transform_s",
    "worker_cpu_s",
    "worker_idle_s",
)


def test_prefetch_advice_names_the_knob_and_a_window_that_covers_the_bursts():
    """Prefetch set by hand: the advice is the window the step needed, what it had plus the most batches
    it waited for in a row (here 3: quick steps after a long one); on chute.DataLoader's fast path as a
    prefetch_factor (prefetch_factor * num_workers batches ahead), on chute.Loader as prefetch."""
    from types import SimpleNamespace

    from chute.doctor import advice
    from chute.doctor.advice import longest_wait_streak
    from chute.doctor.compare import DataLoaderInfo
    from chute.doctor.measure import Step

    cycle = [Step(0, 0.0001, 1.0, 8), Step(0, 0.0001, 0, 8), Step(0, 0.0001, 0, 8)]
    cycle += [Step(0, 0.1, 0, 8)] * 3  # the window emptied: three batches in a row waited for
    steps = [Step(0, 0, 0, 8)] + cycle * 3
    run = SimpleNamespace(measured=steps[1:])
    assert longest_wait_streak(run) == 3
    stall = 0.9 / 3.9
    s = _snapshot(auto_prefetch=False, max_prefetch=2, prefetch=2)
    run = SimpleNamespace(loader_stats=s, wait_s=0.9, step_s=3.0, stall_fraction=stall, measured=steps[1:])
    cpu = SimpleNamespace(cores=2, total_cores_used=1.0)

    def actions(info):
        recs = []
        advice.cpu(SimpleNamespace(run=run, dataloader=info, cpu=cpu), recs, "cpu", "prefetch")
        return [r.action for r in recs]

    two = DataLoaderInfo(2, 8, False, True, 1, "fork", "fast:imagefolder")  # 1 x 2 workers = 2 ahead
    assert any(
        a.startswith("raise prefetch_factor to 3 (it is 1, so 2 batches ahead for num_workers=2") for a in actions(two)
    )
    one = DataLoaderInfo(1, 8, False, True, 2, "fork", "fast:imagefolder")
    assert any(
        a.startswith("raise prefetch_factor to 5 (it is 2, so 2 batches ahead for num_workers=1") for a in actions(one)
    )
    assert any(a.startswith("raise prefetch to 5 (it is 2") for a in actions(None))


def test_torch_workers_time_on_a_core_waiting_or_asleep_gives_the_limit():
    """torch's DataLoader keeps no worker figures: the doctor splits its workers' time by /proc (CPU time,
    and the run-queue delay from schedstat) into on a core, waiting for one and asleep, so the engine tells
    idle workers (prefetch) from starved ones (cores) from busy ones (the stage)."""
    from types import SimpleNamespace

    from chute.doctor.cpu import worker_figures

    base = {k: v for k, v in _snapshot(auto_prefetch=False, max_prefetch=2).items() if not k.endswith("_cpu_s")}
    base.pop("worker_idle_s")
    busy = base["read_s"] + base["decode_s"] + base["transform_s"]

    def limit(on_cpu, waiting, process_cores=None):
        c = SimpleNamespace(mean_children_cores=on_cpu, mean_children_waiting=waiting)
        figures = {**base, **worker_figures(busy, c, 2)}
        figures["process_cpu_s"] = (process_cores if process_cores is not None else on_cpu) * base["elapsed_s"]
        return _native.diagnose(figures)["limit"]

    assert limit(0.6, 0.05) == "prefetch"  # asleep most of the time, cores to spare
    assert limit(0.9, 1.0) == "cores"  # runnable half the time without a core
    assert limit(1.9, 0.05, process_cores=1.95) == "decode"  # busy on their cores
    assert worker_figures(busy, SimpleNamespace(mean_children_cores=1.0, mean_children_waiting=1.0), 2) == {
        "worker_cpu_s": busy / 2,
        "worker_idle_s": 0.0,
    }
    # without schedstat: busy all the time, the CPU per busy second is the cores per worker (no idle time)
    assert worker_figures(busy, SimpleNamespace(mean_children_cores=0.5, mean_children_waiting=None), 2) == {
        "worker_cpu_s": busy / 4
    }


def test_torch_dataloader_prefetch_advice_is_its_prefetch_factor():
    """Workers asleep while a bursty step waits, on torch's DataLoader: the advice is prefetch_factor,
    covering the window the step needed (2 workers x factor 1 = 2 ahead, plus the 3 batches it waited for
    in a row: 5, so a factor of 3)."""
    from types import SimpleNamespace

    from chute.doctor import advice
    from chute.doctor.compare import DataLoaderInfo
    from chute.doctor.measure import Step

    cycle = [Step(0, 0.0001, 1.0, 8), Step(0, 0.0001, 0, 8), Step(0, 0.0001, 0, 8)] + [Step(0, 0.1, 0, 8)] * 3
    run = SimpleNamespace(loader_stats=None, wait_s=0.9, step_s=3.0, stall_fraction=0.9 / 3.9, measured=cycle * 3)
    cpu = SimpleNamespace(cores=2, total_cores_used=0.7, mean_children_cores=0.6, mean_children_waiting=0.02)
    recs = []
    info = DataLoaderInfo(2, 8, False, True, 1, "fork")
    advice.cpu(SimpleNamespace(run=run, dataloader=info, cpu=cpu), recs, "cpu", "prefetch")
    (rec,) = [r for r in recs if "prefetch" in r.action]
    assert rec.action == "raise prefetch_factor to 3 (it is 1, so 2 batches ahead for num_workers=2)"
    assert not rec.measured and "the workers slept 69% of their time" in rec.basis


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


def test_a_settled_stall_still_measures_until_min_seconds_up_to_max_steps():
    """A stall that settles at once (an instant loader, a sleeping step) is measured on while the batches
    span less than min_seconds, `steps` at a time, up to max_steps; without min_seconds it may stop at
    `steps` once settled."""
    from chute.doctor.measure import run_loader

    def loader():
        while True:
            yield torch.zeros(2)

    measure = dict(steps=4, warmup=1, max_steps=12, threshold=verdict_module.INPUT_BOUND_STALL, label="gen")
    run = run_loader(loader(), lambda b: time.sleep(0.001), min_seconds=1e6, **measure)
    assert len(run.measured) == 12  # never 1e6 s: max_steps bounds it
    run = run_loader(loader(), lambda b: time.sleep(0.001), min_seconds=0.0, **measure)
    assert len(run.measured) == 4 or not run.settled(verdict_module.INPUT_BOUND_STALL)


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
