"""The doctor and chute.DataLoader: the script hook sees it (fast and generic path), no verdict from fewer
batches than chute's engine needs, and on a torch DataLoader whose pipeline the drop-in runs natively, the
doctor measures the drop-in and recommends it with the measured gain (estimated, from the drop-in measured
alone, while it watches a script).

torchvision stands in as chute.bench.pil_reference where it does not import."""

from __future__ import annotations

import time

import pytest
from torch.utils.data import DataLoader, Dataset, Subset

import chute
from chute.bench.pil_reference import as_torchvision, real_torchvision
from chute.cli import main as cli_main
from chute.doctor import advice, run_script
from chute.doctor.compare import DROPIN_LABEL, dropin_equivalent
from chute.doctor.findings import MIN_VERDICT_BATCHES, Findings
from chute.doctor.measure import Run, Step

T = real_torchvision() or as_torchvision()
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def slow_default_loader(seconds: float):
    """torchvision's default_loader with a planted cost per file (a slow disk, a slow PIL): still torchvision's
    to chute (same name and module), which decodes natively and never calls it."""

    def default_loader(path):
        time.sleep(seconds)
        return T.default_loader(path)

    default_loader.__module__ = "torchvision.datasets.folder"
    return default_loader


def slow_folder(folder, seconds=0.02):
    return T.ImageFolder(folder, transform=EVAL, loader=slow_default_loader(seconds))


_SCRIPT = """
import sys, time
import torch, chute
from chute.bench.pil_reference import as_torchvision, real_torchvision
T = real_torchvision() or as_torchvision()

class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), i

if sys.argv[2] == "fast":
    dataset = T.ImageFolder(sys.argv[1], transform=T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()]))
else:
    dataset = Rows()
loader = chute.DataLoader(dataset, batch_size=4)
for images, labels in loader:
    time.sleep(0.01)
print("script done", loader.stats()["path"])
"""


@pytest.mark.parametrize("path", ["fast", "generic"])
def test_the_script_hook_watches_chute_dataloader(folder, tmp_path, path, capsys):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    found = run_script(str(script), [str(folder), path], steps=3, warmup=1)
    assert len(found) == 1, "the script's chute.DataLoader was not watched"
    d = found[0]
    assert d.dataloader.path == ("fast:imagefolder" if path == "fast" else "generic")
    assert len(d.run.measured) >= 3 and d.verdict.bound in ("consumer", "input", "borderline")
    if path == "fast":
        assert d.run.loader_stats is not None and d.run.loader_stats["samples"] > 0
    assert f"script done {'fast:imagefolder' if path == 'fast' else 'generic'}" in capsys.readouterr().out
    assert chute.DataLoader.__iter__.__qualname__ == "DataLoader.__iter__"  # the patch is gone


def test_the_cli_runs_a_chute_dataloader_script(folder, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    assert cli_main(["doctor", "--steps", "3", "--warmup", "1", str(script), str(folder), "fast"]) == 0
    assert "iterated no DataLoader" not in capsys.readouterr().out


def test_no_verdict_from_fewer_batches_than_the_engine_needs(folder):
    three_batches = Subset(T.ImageFolder(folder, transform=EVAL), range(12))
    loader = chute.DataLoader(three_batches, batch_size=4)
    d = chute.doctor(loader, lambda b: None, steps=20, warmup=2, storage=False, compare=False)
    assert len(d.run.measured) == 1 < MIN_VERDICT_BATCHES
    assert d.run.loader_stats["bound"] == "unknown"  # the engine says so too
    assert d.verdict.bound == "unknown" and "too few batches" in d.verdict.headline
    assert d.verdict.recommendations == []
    four = chute.DataLoader(Subset(T.ImageFolder(folder, transform=EVAL), range(16)), batch_size=4)
    d = chute.doctor(four, lambda b: None, steps=20, warmup=2, storage=False, compare=False)
    assert len(d.run.measured) == MIN_VERDICT_BATCHES and d.verdict.bound != "unknown"


def test_the_drop_in_is_measured_and_recommended_on_a_torch_dataloader(folder):
    loader = DataLoader(slow_folder(folder), batch_size=4, shuffle=True)
    dropin, kind = dropin_equivalent(loader)
    assert isinstance(dropin, chute.DataLoader) and kind == "imagefolder"
    d = chute.doctor(loader, lambda b: None, steps=4, warmup=1, storage=False)
    labels = [r.label for r in d.comparisons]
    assert f"{DROPIN_LABEL} (fast:imagefolder)" in labels and "chute.Loader (auto)" not in labels
    dropin_run = d.comparisons[labels.index(f"{DROPIN_LABEL} (fast:imagefolder)")]
    rec = next(r for r in d.verdict.recommendations if r.action.startswith("change one import"))
    assert rec.measured and rec.gain == pytest.approx(dropin_run.rate / d.run.rate)
    assert rec.gain >= 1.1  # 20 ms of planted cost per file that the drop-in never pays
    assert "from chute import DataLoader" in str(d)


def test_no_drop_in_where_it_would_fall_back(folder):
    dataset = T.ImageFolder(folder, transform=EVAL, target_transform=lambda y: y)
    loader = DataLoader(dataset, batch_size=4)
    dropin, reason = dropin_equivalent(loader)
    assert dropin is None and "target_transform" in reason
    d = chute.doctor(loader, steps=3, warmup=1, storage=False)
    assert any("drop-in chute.DataLoader: not run" in n and "target_transform" in n for n in d.notes)
    assert all(not r.action.startswith("change one import") for r in d.verdict.recommendations)


_WATCHED = """
import sys, time
import torch
from chute.bench.pil_reference import as_torchvision, real_torchvision
T = real_torchvision() or as_torchvision()

def default_loader(path):
    time.sleep(0.02)
    return T.default_loader(path)
default_loader.__module__ = "torchvision.datasets.folder"

dataset = T.ImageFolder(sys.argv[1], transform=T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()]),
                        loader=default_loader)
for images, labels in torch.utils.data.DataLoader(dataset, batch_size=4):
    time.sleep(0.005)
print("script done")
"""


def test_watching_a_torch_script_estimates_the_drop_ins_gain(folder, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_WATCHED)
    (d,) = run_script(str(script), [str(folder)], steps=3, warmup=1)
    (alone,) = [r for r in d.comparisons if r.label.startswith(DROPIN_LABEL)]
    assert not alone.with_step and len(alone.measured) >= MIN_VERDICT_BATCHES
    rec = next(r for r in d.verdict.recommendations if r.action.startswith("change one import"))
    assert not rec.measured and "measured alone" in rec.basis and rec.gain >= 1.1


def _run(label, waits, steps, with_step=True, samples=4):
    return Run(label, [Step(i, w, s, samples) for i, (w, s) in enumerate(zip(waits, steps))], 0, with_step)


def test_the_drop_ins_estimate_beside_a_job_and_too_few_comparison_batches():
    job = _run("DataLoader num_workers=0", [0.08] * 4, [0.02] * 4)
    alone = _run(f"{DROPIN_LABEL} (fast:imagefolder)", [0.01] * 4, [0.0] * 4, with_step=False)
    d = Findings(target="x", run=job, comparisons=[alone])
    recs = []
    advice.comparisons(d, recs)
    (rec,) = recs
    assert rec.gain == pytest.approx(0.10 / 0.02) and not rec.measured  # the step becomes the limit
    slow_alone = _run(f"{DROPIN_LABEL} (fast:imagefolder)", [0.05] * 4, [0.0] * 4, with_step=False)
    recs = []
    advice.comparisons(Findings(target="x", run=job, comparisons=[slow_alone]), recs)
    assert recs[0].gain == pytest.approx(0.10 / 0.05)  # the drop-in's own time per batch is the limit
    one_batch = _run(f"{DROPIN_LABEL} (fast:imagefolder)", [0.001], [0.02])
    recs = []
    advice.comparisons(Findings(target="x", run=job, comparisons=[one_batch]), recs)
    assert recs == []  # one measured batch is no comparison


def test_dropin_equivalent_keeps_the_loaders_arguments(folder):
    class Rows(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return i

    loader = DataLoader(slow_folder(folder), batch_size=5, shuffle=True, drop_last=True, num_workers=2)
    dropin, _ = dropin_equivalent(loader)
    assert (dropin.batch_size, dropin.drop_last, dropin.num_workers) == (5, True, 2)
    assert type(dropin.sampler).__name__ == "RandomSampler"
    assert dropin_equivalent(chute.DataLoader(Rows(), batch_size=2))[0] is None
    none, why = dropin_equivalent(DataLoader(Rows(), batch_size=2))
    assert none is None and "generic path" in why
