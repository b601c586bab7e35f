"""Damage the loader would find only in some epochs, and files it cannot decode: ``validate='full'``,
``chute pack``'s probe (``--validate``, ``--skip-bad``), ``chute inspect --verify`` and ``chute inspect DIR``."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import chute
from conftest import jpeg_bytes, make_folder, natural_image


def damaged_at_bottom(width: int = 64, height: int = 512) -> bytes:
    """A JPEG whose entropy-coded data loses its last fifth, the end-of-image marker kept: rows near the
    top decode, rows near the bottom hit the marker early ("premature end of data segment")."""
    rng = np.random.default_rng(3)
    data = jpeg_bytes(Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)), 95)
    sos = data.index(b"\xff\xda")
    scan = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    end = len(data) - 2
    assert data[end:] == b"\xff\xd9"
    cut = end - (end - scan) // 5
    while data[cut - 1] == 0xFF:  # not inside a stuffed FF 00
        cut -= 1
    return data[:cut] + b"\xff\xd9"


@pytest.fixture()
def bottom_damaged_folder(tmp_path):
    d = tmp_path / "damaged" / "c0"
    d.mkdir(parents=True)
    (d / "a_good.jpg").write_bytes(jpeg_bytes(natural_image(np.random.default_rng(0), 64, 512)))
    (d / "b_bad.jpg").write_bytes(damaged_at_bottom())
    return tmp_path / "damaged"


def epoch(loader) -> list:
    return [(x.clone(), y.clone()) for x, y in loader]


def test_bottom_damage_escapes_a_top_crop_by_default_and_fails_with_validate_full(bottom_damaged_folder):
    # The trade-off of the default: the crop (rows 240..271 of 512) never reaches the damage.
    crop = [chute.CenterCrop(32)]
    default = chute.Loader(chute.ImageFolder(bottom_damaged_folder), 2, transforms=crop, num_threads=1)
    assert len(epoch(default)) == 1
    full = chute.Loader(chute.ImageFolder(bottom_damaged_folder), 2, transforms=crop, num_threads=1,
                        validate="full")
    with pytest.raises(chute.SampleError, match="b_bad.jpg") as raised:
        epoch(full)
    assert "Corrupt JPEG data" in str(raised.value)
    skip = chute.Loader(chute.ImageFolder(bottom_damaged_folder), 1, transforms=crop, num_threads=1,
                        validate="full", on_error="skip")
    assert len(epoch(skip)) == 1
    assert [e.index for e in skip.errors()] == [1]


@pytest.mark.parametrize("options", [{}, {"scaled_decode": True}, {"apply_exif_orientation": True}],
                         ids=["plain", "scaled", "exif"])
def test_validate_full_delivers_the_same_pixels(folder, options):
    tf = [chute.RandomResizedCrop(64), chute.RandomHorizontalFlip()]
    runs = []
    for validate in ("window", "full"):
        loader = chute.Loader(chute.ImageFolder(folder), 8, shuffle=True, seed=5, transforms=tf, num_threads=2,
                              validate=validate, **options)
        runs.append([epoch(loader) for _ in range(2)])
    for a, b in zip(runs[0], runs[1]):
        assert len(a) == len(b)
        for (xa, ya), (xb, yb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_validate_must_be_window_or_full(folder):
    with pytest.raises(ValueError, match="validate must be 'window'"):
        chute.Loader(chute.ImageFolder(folder), 2, validate="yes")
