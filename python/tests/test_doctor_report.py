"""The HTML report is self-contained and its plots render: decoded here, and drawn by headless Chromium
(scripts/setup.sh installs Debian's chromium)."""

from __future__ import annotations

import base64
import io
import re
import time

import numpy as np
import pytest
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
    assert "src=\"http" not in text and "<script" not in text and "<link" not in text
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 3  # timeline, per-stage bars, throughput
    for b64 in images:
        image = Image.open(io.BytesIO(base64.b64decode(b64)))
        assert image.width >= 500 and image.height >= 100
    assert d.verdict.headline.split(":")[0] in text


def _colour_pixels(png, colour: str, tolerance: int = 12) -> int:
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
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
