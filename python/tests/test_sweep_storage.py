"""chute bench --sweep-storage: the error statistics, the comparison's guards, the rows that run today
(originals, a plain pack, decode='reduced'), rows whose pack fails, JSON and the plot."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
from conftest import natural_image

from chute import cli
from chute.bench import storage


def test_error_histogram_matches_numpy():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (5, 7, 9, 3), dtype=np.uint8)
    b = np.clip(a.astype(np.int16) + rng.integers(-20, 21, a.shape), 0, 255).astype(np.uint8)
    b[2] = a[2]  # one image bit-identical
    hist = storage.ErrorHistogram()
    hist.add(a[:3], b[:3])
    hist.add(a[3:], b[3:])
    e = hist.result()
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    assert e.mae == pytest.approx(d.mean())
    assert e.p99 == int(np.percentile(d, 99, method="inverted_cdf"))
    assert e.max == d.max()
    assert (e.images, e.changed) == (5, 4)


def test_error_histogram_refuses_what_it_cannot_compare():
    hist = storage.ErrorHistogram()
    with pytest.raises(ValueError, match="nothing was compared"):
        hist.result()
    with pytest.raises(ValueError, match="one shape"):
        hist.add(np.zeros((1, 2, 2, 3), np.uint8), np.zeros((1, 2, 3, 3), np.uint8))
    with pytest.raises(ValueError, match="one shape"):
        hist.add(np.zeros((1, 2), np.uint8), np.zeros((1, 2), np.int16))


def test_compare_checks_the_samples_line_up():
    x = np.zeros((2, 4, 4, 3), np.uint8)
    same = [(x, torch.tensor([0, 1]))]
    assert storage.compare(same, same).max == 0
    with pytest.raises(ValueError, match="labels"):
        storage.compare(same, [(x, torch.tensor([1, 0]))])
    with pytest.raises(ValueError, match="numbers of samples"):
        storage.compare(same + same, same)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Twelve 640x520 JPEGs: Resize(256) shrinks them 2.03x, so reducing_gap=1.0 reduces them 2x."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(5)
    for c in range(2):
        (root / f"c{c}").mkdir()
        for i in range(6):
            natural_image(rng, 640, 520).save(root / f"c{c}" / f"{i}.jpg", quality=90)
    return root


def test_sweep_rows_that_run_and_rows_whose_pack_fails(photos):
    rows = (("pack", []), ("pack --no-such-flag", ["--no-such-flag"]))
    result = storage.run_storage_sweep(photos, batch_size=5, rounds=1, threads=1, reducing_gap=1.0, pack_rows=rows)
    by_name = {r.name: r for r in result.rows}
    originals = by_name["originals"]
    # The reference against itself: deterministic, so bit-identical.
    assert (originals.error.max, originals.error.changed, originals.error.images) == (0, 0, 12)
    assert originals.bytes == sum(p.stat().st_size for p in photos.rglob("*.jpg"))
    # A pack that stores the same bytes decodes to the same pixels.
    plain = by_name["pack"]
    assert plain.unavailable is None and plain.error.max == 0 and plain.bytes > originals.bytes
    failed = by_name["pack --no-such-flag"]
    assert failed.unavailable and "--no-such-flag" in failed.unavailable
    assert failed.timings == [] and failed.error is None
    reduced = by_name["originals, decode='reduced' (gap 1)"]
    assert 0 < reduced.error.mae <= 1.0 and reduced.error.changed == 12
    for row in (originals, plain, reduced):
        assert len(row.timings) == 1 and row.rate > 0 and row.per_core > 0
    ffcv = by_name[storage.FFCV_NAME]
    assert ffcv.unavailable.startswith("no --ffcv-python given")


def test_sweep_storage_cli_json_and_plot(photos, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "storage.png"
    rc = cli.main(
        [
            "bench",
            "--root",
            str(photos),
            "--sweep-storage",
            "--rounds",
            "1",
            "--batch-size",
            "6",
            "--threads",
            "1",
            "--json",
            "--plot",
            str(png),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in out["rows"]]
    assert names[0] == "originals" and "originals, decode='reduced' (gap 3)" in names
    assert [n for n, _ in storage.PACK_ROWS] == names[1 : 1 + len(storage.PACK_ROWS)]
    for row in out["rows"]:  # each row ran, or says why not
        assert (row["unavailable"] is None) == (row["error"] is not None)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sweep-storage", "--sweep"], "separate runs"),
        (["--ffcv-python", "python3"], "go with --sweep-storage"),
        (["--images", "5"], "go with --sweep-storage"),
        (["--sweep-storage", "--reducing-gap", "0.5"], "must be >= 1.0"),
        (["--plot", "x.png"], "--plot goes with"),
    ],
)
def test_sweep_storage_cli_refuses_mismatched_flags(photos, capsys, argv, message):
    assert cli.main(["bench", "--root", str(photos), *argv]) == 2
    assert message in capsys.readouterr().out


def test_sweep_on_the_first_images_packs_and_compares_only_those(photos):
    # This Python has no ffcv: the FFCV row says so, and the rest runs.
    result = storage.run_storage_sweep(
        photos, batch_size=4, rounds=1, threads=1, images=5, pack_rows=(("pack", []),), ffcv_python=sys.executable
    )
    ffcv = next(r for r in result.rows if r.name == storage.FFCV_NAME)
    assert "No module named 'ffcv'" in ffcv.unavailable
    assert result.images == 5
    first = sorted(photos.rglob("*.jpg"))[:5]
    by_name = {r.name: r for r in result.rows}
    assert by_name["originals"].bytes == sum(p.stat().st_size for p in first)
    for name in ("originals", "pack", "originals, decode='reduced' (gap 3)"):
        assert by_name[name].error.images == 5 and by_name[name].error.max == 0  # gap 3: nothing reduced
    with pytest.raises(ValueError, match=r"images must be in \[1, 12\]"):
        storage.run_storage_sweep(photos, images=13)


@pytest.mark.skipif(
    not os.environ.get("CHUTE_FFCV_PYTHON"),
    reason="set CHUTE_FFCV_PYTHON to a Python with ffcv (scripts/setup_ffcv.sh) to run FFCV's row",
)
def test_ffcv_row_writes_reads_and_compares(photos):
    result = storage.run_storage_sweep(
        photos, batch_size=4, rounds=1, threads=1, pack_rows=(), ffcv_python=os.environ["CHUTE_FFCV_PYTHON"]
    )
    ffcv = next(r for r in result.rows if r.name == storage.FFCV_NAME)
    assert ffcv.unavailable is None, ffcv.unavailable
    assert ffcv.bytes > 0 and ffcv.rate > 0 and ffcv.per_core > 0
    # Stored at 256 px, re-encoded, resampled by OpenCV: close to the originals, never identical.
    assert ffcv.error.images == 12 and 0 < ffcv.error.mae < 10
