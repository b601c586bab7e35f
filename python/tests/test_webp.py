"""WebP decoding through chute.Loader: exactly Pillow's ``Image.open(f).convert("RGB")`` (Pillow decodes
WebP with libwebp too; alpha is dropped, not composited), crops through the same pipeline as PNG (decode
whole, then the window), and errors for what libwebp cannot decode."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import natural_image
from PIL import Image

import chute

H, W = 45, 67  # odd sizes: chroma upsampling at the edges


def webp_bytes(kind: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    img = natural_image(rng, W, H)
    if kind.endswith("rgba"):
        alpha = Image.fromarray(rng.integers(0, 256, (H, W), dtype=np.uint8))
        img = img.convert("RGBA")
        img.putalpha(alpha)
    if kind.startswith("gray"):
        img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, format="WEBP", lossless=kind.startswith("lossless"), quality=80)
    return buf.getvalue()


KINDS = ["lossy_rgb", "lossy_rgba", "lossless_rgb", "lossless_rgba", "gray_lossy"]


def pil_rgb(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        return np.asarray(Image.open(f).convert("RGB"))


def decode_all(root: Path, transforms, **kwargs) -> list[tuple[Path, np.ndarray]]:
    source = chute.ImageFolder(root)
    loader = chute.Loader(source, batch_size=1, transforms=transforms, **kwargs)
    return [
        (Path(path), images[0].permute(1, 2, 0).numpy().copy())
        for (images, _), (path, _) in zip(loader, source.samples, strict=True)
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_each_webp_kind_decodes_exactly_like_pillow(tmp_path, kind):
    for i in range(2):
        path = tmp_path / "c" / f"{kind}_{i}.webp"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(webp_bytes(kind, i))
    got = decode_all(tmp_path, [chute.CenterCrop((H, W))])
    assert len(got) == 2
    for path, image in got:
        np.testing.assert_array_equal(image, pil_rgb(path), err_msg=str(path))


@pytest.mark.parametrize("kind", ["lossy_rgb", "lossless_rgba"])
def test_centre_crop_of_a_webp_is_pillows_crop(tmp_path, kind):
    (tmp_path / "c").mkdir()
    path = tmp_path / "c" / "a.webp"
    path.write_bytes(webp_bytes(kind, 3))
    h, w = H - 10, W - 17
    top, left = int(round((H - h) / 2.0)), int(round((W - w) / 2.0))
    ((_, image),) = decode_all(tmp_path, [chute.CenterCrop((h, w))])
    np.testing.assert_array_equal(image, pil_rgb(path)[top : top + h, left : left + w])


def test_resized_webp_matches_the_same_pixels_as_png(tmp_path):
    # The resize path sees the same pixels whichever container holds them: a lossless WebP and a PNG of
    # one image give the same batches under RandomResizedCrop + flip, with threads.
    rng = np.random.default_rng(8)
    for i in range(6):
        img = natural_image(rng, 80 + 7 * i, 60 + 5 * i)
        for fmt, root in (("WEBP", "w"), ("PNG", "p")):
            (tmp_path / root / "c").mkdir(parents=True, exist_ok=True)
            img.save(tmp_path / root / "c" / f"{i}.{fmt.lower()}", format=fmt, lossless=True)
    tf = [chute.RandomResizedCrop(32), chute.RandomHorizontalFlip()]
    runs = [
        list(chute.Loader(chute.ImageFolder(tmp_path / root), 3, shuffle=True, seed=1, transforms=tf, num_threads=2))
        for root in ("w", "p")
    ]
    for (xa, ya), (xb, yb) in zip(*runs, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_damaged_and_animated_webp_are_sample_errors(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    good = webp_bytes("lossy_rgb", 1)
    (d / "a_good.webp").write_bytes(good)
    (d / "b_cut.webp").write_bytes(good[: len(good) // 2])
    frames = [natural_image(np.random.default_rng(i), 32, 32) for i in range(2)]
    buf = io.BytesIO()
    frames[0].save(buf, format="WEBP", save_all=True, append_images=frames[1:], duration=50)
    (d / "c_animated.webp").write_bytes(buf.getvalue())
    loader = chute.Loader(chute.ImageFolder(tmp_path), 1, transforms=[chute.CenterCrop(8)], on_error="skip")
    assert sum(len(y) for _, y in loader) == 1
    reasons = {Path(e.path).name: e.reason for e in loader.errors()}
    assert "WebP" in reasons["b_cut.webp"] and "CorruptData" in reasons["b_cut.webp"]
    assert "animated WebP" in reasons["c_animated.webp"]


def test_image_folder_lists_what_chute_decodes_and_warns_about_the_rest(tmp_path):
    img = natural_image(np.random.default_rng(0), 20, 20)
    (tmp_path / "c").mkdir()
    for name, fmt in (("a.jpg", "JPEG"), ("b.png", "PNG"), ("c.webp", "WEBP"), ("d.bmp", "BMP"), ("e.tif", "TIFF")):
        img.save(tmp_path / "c" / name, format=fmt)
    with pytest.warns(UserWarning, match=r"left out 2 files in formats chute cannot decode \(1 \.bmp, 1 \.tif\)"):
        folder = chute.ImageFolder(tmp_path)
    assert [Path(p).name for p, _ in folder.samples] == ["a.jpg", "b.png", "c.webp"]
    assert sorted(Path(p).name for p in folder.left_out) == ["d.bmp", "e.tif"]
    (tmp_path / "c" / "d.bmp").unlink()
    (tmp_path / "c" / "e.tif").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chute.ImageFolder(tmp_path)
    (tmp_path / "empty").mkdir()
    img.save(tmp_path / "empty" / "x.bmp", format="BMP")
    with pytest.raises(FileNotFoundError, match=r"Supported extensions are: \.jpg, \.jpeg, \.png, \.webp \(1 files"):
        chute.ImageFolder(tmp_path)
