"""The HTML report is self-contained and its plots render: decoded here, and drawn by headless Chromium
(scripts/setup.sh installs Debian's chromium)."""

from __future__ import annotations

import base64
import io
import re
import time

import numpy as np
import pytest
import torch
from PIL import Image

import chute
from chute.doctor.report_html import STALL_COLOUR, STEP_COLOUR, chromium, screenshot


@pytest.fixture(scope="module")
def report(folder, tmp_path_factory):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(32)])
    d = chute.doctor(loader, lambda batch: time.sleep(0.01), steps=6, warmup=1)
    return d, d.save_html(tmp_path_factory.mktemp("report") / "report.html")


def test_report_is_self_contained_with_three_plots(report):
    d, path = report
    text = path.read_text()
    assert 'src="http' not in text and "<script" not in text and "<link" not in text
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 3  # timeline, per-stage bars, throughput
    for b64 in images:
        image = Image.open(io.BytesIO(base64.b64decode(b64)))
        assert image.width >= 500 and image.height >= 100
    assert d.verdict.headline.split(":")[0] in text


def _colour_pixels(png, colour: str, tolerance: int = 12) -> int:
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(rgb - target).max(axis=-1) <= tolerance).sum())


@pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (scripts/setup.sh installs it)")
def test_chromium_renders_the_plots(report, tmp_path):
    _, path = report
    shot = screenshot(path, tmp_path / "report.png")
    # The stall (red) and step (blue) colours appear only inside the plots; the page's own CSS has neither.
    assert _colour_pixels(shot, STALL_COLOUR) > 500 and _colour_pixels(shot, STEP_COLOUR) > 500
    # The same page without its images has none of them: the pixels above are the decoded plots.
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r'src="data:image/png;base64,[^"]+"', 'src=""', path.read_text()))
    bare_shot = screenshot(bare, tmp_path / "bare.png")
    assert _colour_pixels(bare_shot, STALL_COLOUR) == 0 and _colour_pixels(bare_shot, STEP_COLOUR) == 0
    assert Image.open(shot).height > Image.open(bare_shot).height + 600  # three plots' worth of page


def test_device_findings_shape_the_verdict_and_the_timeline():
    """No GPU here: the device layer's numbers are made up for this test only, to check what the verdict
    and the report do with them (the NVML binding itself is tested against a fake libnvidia-ml)."""
    from torch.utils.data import DataLoader, TensorDataset

    from chute.doctor.device import CopyTiming, DeviceReport, GpuTimeline
    from chute.doctor.report_html import timeline_png
    from chute.doctor.verdict import decide

    class Slow(TensorDataset):  # 1 ms per sample: the step (a blocking copy) is left waiting for data
        def __getitem__(self, i):
            time.sleep(0.001)
            return super().__getitem__(i)

    loader = DataLoader(Slow(torch.randn(96, 3, 32, 32), torch.arange(96)), batch_size=8)
    d = chute.doctor(loader, lambda batch: batch[0].to("meta"), steps=6, warmup=1, storage=False)
    assert d.run.stall_fraction > 0.5
    without_gpu = Image.open(io.BytesIO(base64.b64decode(timeline_png(d)))).height
    t = [0.05 * i for i in range(40)]
    per_batch_ms = 1e3 * (d.run.wait_s + d.run.step_s) / len(d.run.measured)  # copies scaled to the measured batch
    d.device = DeviceReport(
        available=True,
        name="made-up GPU",
        memory_total=80 << 30,
        timeline=GpuTimeline(t, [90 if i % 4 else 0 for i in range(40)], [1 << 30] * 40),
        copy=CopyTiming(8 * 3 * 32 * 32 * 4, pageable_ms=0.6 * per_batch_ms, pinned_ms=0.2 * per_batch_ms),
        sample_hz=20,
    )
    v = decide(d)
    assert any("GPU utilisation mean" in e for e in v.evidence)
    actions = [r.action for r in v.recommendations if not r.measured]
    assert "set pin_memory=True" in actions
    assert any("non_blocking=True" in a for a in actions)  # the step's copies were blocking
    assert any("normalisation to the GPU" in a for a in actions)  # float32 batches cross PCIe
    assert Image.open(io.BytesIO(base64.b64decode(timeline_png(d)))).height > without_gpu + 100
