"""Pixel parity with Pillow, which is what torchvision's transforms run on PIL images.

chute decodes with libjpeg-turbo (accurate integer IDCT, fancy upsampling: PIL's settings) and resamples
with PIL's own fixed-point antialiased bilinear algorithm, so the stated tolerance (mean absolute error
< 1.0, max < 8 on 0-255) is met with room to spare; the measured figures are printed with -s.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import chute
from chute import _native
from chute.bench import pil_reference as R

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def eval_reference(path, resize: int, crop: int) -> np.ndarray:
    """torchvision's Resize(resize) + CenterCrop(crop) on the PIL image (chute.bench.pil_reference)."""
    return np.asarray(R.CenterCrop(crop)(R.Resize(resize)(R.pil_loader(path))))


def as_hwc(batch: torch.Tensor) -> np.ndarray:
    return batch.permute(0, 2, 3, 1).numpy()


def report(name: str, diffs: list[np.ndarray]) -> tuple[float, int]:
    all_d = np.concatenate([d.ravel() for d in diffs])
    mae, mx = float(all_d.mean()), int(all_d.max())
    print(f"\n[parity] {name}: images={len(diffs)} MAE={mae:.4f} max={mx}")
    return mae, mx


def test_eval_pipeline_matches_pil(folder):
    source = chute.ImageFolder(folder)
    loader = chute.Loader(source, batch_size=len(source), transforms=[chute.Resize(64), chute.CenterCrop(56)])
    ((images, _),) = list(loader)
    diffs = []
    for out, (path, _) in zip(as_hwc(images), source.samples):
        ref = eval_reference(path, 64, 56)
        diffs.append(np.abs(out.astype(np.int16) - ref.astype(np.int16)))
    mae, mx = report("Resize(64)+CenterCrop(56)", diffs)
    assert mae < 1.0 and mx < 8
    assert mae == 0 and mx == 0  # measured: identical to PIL, bit for bit


@pytest.mark.parametrize("flip", [False, True])
def test_random_resized_crop_matches_pil_for_the_same_window(folder, flip):
    source = chute.ImageFolder(folder)
    rrc = chute.RandomResizedCrop(48)
    transforms = [rrc] + ([chute.RandomHorizontalFlip(1.0)] if flip else [])
    loader = chute.Loader(source, batch_size=len(source), seed=11, transforms=transforms)
    ((images, _),) = list(loader)
    diffs = []
    for index, (out, (path, _)) in enumerate(zip(as_hwc(images), source.samples)):
        img = R.pil_loader(path)
        x, y, w, h = _native.random_resized_crop_box(img.width, img.height, rrc._to_native(), 11, 0, index)
        ref = R.resized_crop(img, y, x, h, w, (48, 48))
        if flip:
            ref = ref.transpose(Image.FLIP_LEFT_RIGHT)
        diffs.append(np.abs(out.astype(np.int16) - np.asarray(ref).astype(np.int16)))
    mae, mx = report(f"RandomResizedCrop(48) flip={flip}", diffs)
    assert mae < 1.0 and mx < 8
    assert mae == 0 and mx == 0


def test_normalize_matches_torchvision_arithmetic(folder):
    source = chute.ImageFolder(folder)
    t = [chute.Resize(40), chute.CenterCrop(32)]
    ((u8, _),) = list(chute.Loader(source, batch_size=len(source), transforms=t))
    ((f32, _),) = list(
        chute.Loader(source, batch_size=len(source), transforms=t + [chute.Normalize(MEAN, STD)], dtype=torch.float32)
    )
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    expected = (u8.float() / 255 - mean) / std  # ToTensor, then Normalize
    torch.testing.assert_close(f32, expected, rtol=0, atol=1e-6)


def test_random_resized_crop_windows_follow_torchvision_distribution():
    """chute's windows and torchvision's get_params (the reference re-implementation in chute.bench,
    checked against torchvision) have the same area, ratio and position statistics."""
    t = chute.RandomResizedCrop(224)._to_native()
    n = 4000
    ours = np.array([_native.random_resized_crop_box(500, 375, t, 0, 0, i) for i in range(n)], dtype=np.float64)
    torch.manual_seed(0)
    img = Image.new("RGB", (500, 375))
    theirs = np.array(
        [
            (j, i, w, h)
            for i, j, h, w in (R.RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(n))
        ],
        dtype=np.float64,
    )
    for boxes in (ours, theirs):
        area = boxes[:, 2] * boxes[:, 3] / (500 * 375)
        assert area.min() >= 0.079 and area.max() <= 1.0

    def stats(b):
        return np.array(
            [
                (b[:, 2] * b[:, 3]).mean() / (500 * 375),
                (b[:, 2] / b[:, 3]).mean(),
                (b[:, 0] / np.maximum(1, 500 - b[:, 2])).mean(),
            ]
        )

    # Standard errors at n=4000 are below 0.005 for each statistic.
    np.testing.assert_allclose(stats(ours), stats(theirs), atol=0.02)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_outputs_round_like_torch(folder, dtype):
    source = chute.ImageFolder(folder)
    t = [chute.RandomResizedCrop(40), chute.RandomHorizontalFlip(), chute.Normalize(MEAN, STD)]
    ((f32, _),) = list(chute.Loader(source, batch_size=len(source), transforms=t, dtype=torch.float32))
    ((half, _),) = list(chute.Loader(source, batch_size=len(source), transforms=t, dtype=dtype))
    assert half.dtype == dtype
    assert torch.equal(half, f32.to(dtype))  # round to nearest even, bit for bit


def test_cmyk_jpeg_matches_pil(tmp_path):
    from conftest import natural_image

    root = tmp_path / "cmyk"
    (root / "a").mkdir(parents=True)
    rng = np.random.default_rng(3)
    sizes = []
    for i in range(4):
        img = natural_image(rng, 120, 90).convert("CMYK")
        img.save(root / "a" / f"{i}.jpg", quality=93)
        sizes.append(img.size)
    source = chute.ImageFolder(root)
    ((images, _),) = list(chute.Loader(source, batch_size=4, transforms=[chute.CenterCrop((90, 120))]))
    diffs = []
    for out, (path, _) in zip(as_hwc(images), source.samples):
        with Image.open(path) as im:
            assert im.mode == "CMYK"
            ref = np.asarray(im.convert("RGB"))
        diffs.append(np.abs(out.astype(np.int16) - ref.astype(np.int16)))
    mae, mx = report("CMYK JPEG", diffs)
    assert mae == 0 and mx == 0


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_follows_pil_exif_transpose(tmp_path, orientation):
    from conftest import natural_image
    from PIL import ImageOps

    root = tmp_path / "exif"
    (root / "a").mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = orientation
    natural_image(np.random.default_rng(orientation), 64, 40).save(
        root / "a" / "x.jpg", quality=95, exif=exif, subsampling=2
    )
    with Image.open(root / "a" / "x.jpg") as im:
        plain = im.convert("RGB")
        upright = ImageOps.exif_transpose(im).convert("RGB")
    source = chute.ImageFolder(root)
    for apply, ref in ((False, plain), (True, upright)):
        w, h = ref.size
        t = [chute.CenterCrop((h - 10, w - 6))]
        ((x, _),) = list(chute.Loader(source, batch_size=1, transforms=t, apply_exif_orientation=apply))
        expected = np.asarray(R.CenterCrop((h - 10, w - 6))(ref))
        assert np.array_equal(as_hwc(x)[0], expected), f"apply={apply}"


def test_max_pixels_guard_names_the_sample(folder):
    source = chute.ImageFolder(folder)
    loader = chute.Loader(source, batch_size=4, transforms=[chute.CenterCrop(32)], max_pixels=1000)
    with pytest.raises(chute.SampleError, match="decompression bomb") as info:
        list(loader)
    assert info.value.index == 0


@pytest.fixture(scope="module")
def large_folder(tmp_path_factory):
    """Photos large enough for the scaled IDCT to apply: 1200x900 and 900x1200, 4:4:4 and 4:2:0."""
    from conftest import natural_image

    root = tmp_path_factory.mktemp("large")
    (root / "a").mkdir()
    rng = np.random.default_rng(21)
    for i in range(8):
        w, h = (1200, 900) if i % 2 == 0 else (900, 1200)
        natural_image(rng, w, h).save(root / "a" / f"{i}.jpg", quality=92, subsampling=0 if i < 4 else 2)
    return root


def test_reduced_decode_at_gap_one_stays_within_tolerance_of_pil(large_folder):
    """reducing_gap=1.0 reduces as far as the resize allows (the old scaled_decode=True)."""
    source = chute.ImageFolder(large_folder)
    rrc = chute.RandomResizedCrop(224, scale=(0.5, 1.0))
    out = {}
    for decode in ("exact", "reduced"):
        ((x, _),) = list(
            chute.Loader(source, batch_size=len(source), seed=3, transforms=[rrc], decode=decode, reducing_gap=1.0)
        )
        out[decode] = as_hwc(x)
    diffs_rrc, diffs_exact = [], []
    for index, (path, _) in enumerate(source.samples):
        img = R.pil_loader(path)
        bx, by, bw, bh = _native.random_resized_crop_box(img.width, img.height, rrc._to_native(), 3, 0, index)
        ref = np.asarray(R.resized_crop(img, by, bx, bh, bw, (224, 224))).astype(np.int16)
        diffs_exact.append(np.abs(out["exact"][index].astype(np.int16) - ref))
        diffs_rrc.append(np.abs(out["reduced"][index].astype(np.int16) - ref))
    assert report("RandomResizedCrop, full decode", diffs_exact) == (0.0, 0)
    # The scaled IDCT averages before the triangle filter does: close on average, but a sharp edge can move
    # a pixel by more than the default tolerance's 8, which is why decode='exact' is the default.
    mae, mx = report("RandomResizedCrop, scaled IDCT, reducing_gap=1", diffs_rrc)
    assert 0 < mae < 1.0 and mx < 32

    t = [chute.Resize(256), chute.CenterCrop(224)]
    ((x, _),) = list(chute.Loader(source, batch_size=len(source), transforms=t, decode="reduced", reducing_gap=1.0))
    diffs = []
    for got, (path, _) in zip(as_hwc(x), source.samples):
        ref = eval_reference(path, 256, 224)
        diffs.append(np.abs(got.astype(np.int16) - ref.astype(np.int16)))
    mae, mx = report("Resize(256)+CenterCrop(224), scaled IDCT, reducing_gap=1", diffs)
    assert 0 < mae < 1.0 and mx < 32


# Small outputs, so that the 1200x900 photos shrink by more than 2 x the default gap of 3.
SMALL_EVAL = [chute.Resize(128), chute.CenterCrop(112)]
SMALL_TRAIN = [chute.RandomResizedCrop(112, scale=(0.5, 1.0))]


@pytest.mark.parametrize("transforms", [SMALL_EVAL, SMALL_TRAIN], ids=["eval", "train"])
def test_reduced_decode_at_the_default_gap_is_within_one_level_of_exact(large_folder, transforms):
    source = chute.ImageFolder(large_folder)
    out = {}
    for decode in ("exact", "reduced"):
        ((x, _),) = list(chute.Loader(source, batch_size=len(source), seed=4, transforms=transforms, decode=decode))
        out[decode] = as_hwc(x).astype(np.int16)
    diffs = list(np.abs(out["reduced"] - out["exact"]))
    mae, mx = report(f"reduced (gap 3) against exact, {len(transforms)} transforms", diffs)
    assert mae > 0, "nothing was reduced: the test no longer tests the reduction"
    assert mae <= 1.0 and mx < 32


def test_reduced_decode_with_a_gap_that_allows_no_reduction_is_exact(large_folder):
    source = chute.ImageFolder(large_folder)
    t = SMALL_EVAL + [chute.RandomHorizontalFlip()]
    batches = {}
    for decode, gap in (("exact", 3.0), ("reduced", 7.1)):  # 900 / 128 = 7.03 < 7.1 * 1
        ((x, _),) = list(
            chute.Loader(source, batch_size=len(source), seed=2, transforms=t, decode=decode, reducing_gap=gap)
        )
        batches[decode] = x
    assert torch.equal(batches["exact"], batches["reduced"])
    ((x, _),) = list(
        chute.Loader(source, batch_size=len(source), seed=2, transforms=t, decode="reduced", reducing_gap=3.5)
    )  # 7.03 / 3.5 >= 2: reduced, so not equal
    assert not torch.equal(batches["exact"], x)


@pytest.mark.parametrize("gap", [2, 3])
def test_reduced_decode_follows_pillows_draft_and_reducing_gap(large_folder, gap):
    """Pillow's own reduction of a JPEG (Image.thumbnail's way: draft() at size * reducing_gap, then resize
    from the box it returns) against chute's, for Resize + CenterCrop."""
    source = chute.ImageFolder(large_folder)
    ((x, _),) = list(
        chute.Loader(source, batch_size=len(source), transforms=SMALL_EVAL, decode="reduced", reducing_gap=gap)
    )
    diffs, reduced = [], 0
    for got, (path, _) in zip(as_hwc(x), source.samples):
        with Image.open(path) as im:
            w, h = im.size
            new_w, new_h = R.resized_output_size(w, h, 128)  # torchvision's Resize(128) rule
            _, box = im.draft("RGB", (int(new_w * gap), int(new_h * gap)))
            reduced += im.size != (w, h)
            ref = R.CenterCrop(112)(im.convert("RGB").resize((new_w, new_h), Image.BILINEAR, box=box))
        diffs.append(np.abs(got.astype(np.int16) - np.asarray(ref).astype(np.int16)))
    assert reduced == len(source)  # Pillow reduced every one as well
    # Bit-exact here (the same libjpeg-turbo scaled IDCT, Pillow's box arithmetic and pass order); one level
    # is allowed for a Pillow built on another libjpeg.
    mae, mx = report(f"reduced against Pillow draft + resize, gap {gap}", diffs)
    assert mae <= 0.01 and mx <= 1


def test_reduced_random_crops_follow_pillows_draft_and_resize_box(large_folder):
    """RandomResizedCrop: the box drawn on the full image, divided by the reduction in the drafted image
    (Pillow's resize rule for the factor: int(box / size / reducing_gap), a power of two on both axes)."""
    source = chute.ImageFolder(large_folder)
    gap, rrc = 2.0, SMALL_TRAIN[0]
    ((x, _),) = list(
        chute.Loader(source, batch_size=len(source), seed=6, transforms=[rrc], decode="reduced", reducing_gap=gap)
    )
    diffs, reductions = [], []
    for index, (got, (path, _)) in enumerate(zip(as_hwc(x), source.samples)):
        with Image.open(path) as im:
            w, h = im.size
            bx, by, bw, bh = _native.random_resized_crop_box(w, h, rrc._to_native(), 6, 0, index)
            factor = min(int(bw / 112 / gap), int(bh / 112 / gap), 8)
            d = max(f for f in (1, 2, 4, 8) if f <= max(factor, 1))
            im.draft("RGB", (w // d, h // d))
            assert im.size == (-(-w // d), -(-h // d))
            box = (bx / d, by / d, min(im.width, (bx + bw) / d), min(im.height, (by + bh) / d))
            ref = im.convert("RGB").resize((112, 112), Image.BILINEAR, box=box)
        reductions.append(d)
        diffs.append(np.abs(got.astype(np.int16) - np.asarray(ref).astype(np.int16)))
    assert max(reductions) > 1
    mae, mx = report(f"reduced RandomResizedCrop against Pillow draft + resize, reductions {reductions}", diffs)
    assert mae <= 0.01 and mx <= 1


@pytest.fixture(scope="module")
def tall_folder(tmp_path_factory):
    """PNGs (no decoder in the comparison) whose resizes shrink the height far more than the width: where
    Pillow 13 runs its vertical pass first, and Pillow <= 12 does not."""
    from conftest import natural_image

    root = tmp_path_factory.mktemp("tall")
    (root / "a").mkdir()
    rng = np.random.default_rng(8)
    for i, (w, h) in enumerate([(200, 600), (180, 700), (300, 900), (500, 375), (375, 500), (260, 780)]):
        natural_image(rng, w, h).save(root / "a" / f"{i}.png")
    return root


@pytest.mark.parametrize("size", [(224, 224), (50, 150), (100, 60)])
def test_resize_follows_the_installed_pillows_pass_order(tall_folder, size):
    """Bit-exact with the installed Pillow, whichever release: chute orders its two rounding passes as it
    does (chute/resampling.py). Run with Pillow 13 (main venv, .venv-tv) and 11.3 (scripts/test_torchvision.sh)."""
    import PIL

    from chute import resampling

    assert resampling.pass_order() == resampling.order_for_pillow(PIL.__version__)
    source = chute.ImageFolder(tall_folder)
    ((x, _),) = list(chute.Loader(source, batch_size=len(source), transforms=[chute.Resize(size)]))
    diffs = []
    for out, (path, _) in zip(as_hwc(x), source.samples):
        ref = np.asarray(R.Resize(size)(R.pil_loader(path)))
        diffs.append(np.abs(out.astype(np.int16) - ref.astype(np.int16)))
    mae, mx = report(f"Resize({size}) with Pillow {PIL.__version__}'s pass order", diffs)
    assert mae == 0 and mx == 0


def test_the_other_pass_order_differs_by_one_level(tall_folder):
    """What following the wrong Pillow costs: one level on some pixels (why the order is detected)."""
    from chute import resampling

    source = chute.ImageFolder(tall_folder)
    out = {}
    saved = resampling.pass_order()
    try:
        for order in resampling.ORDERS:
            resampling.set_pass_order(order)
            ((out[order], _),) = list(
                chute.Loader(source, batch_size=len(source), transforms=[chute.Resize((224, 224))])
            )
    finally:
        resampling.set_pass_order(saved)
    d = (out["pillow13"].short() - out["horizontal_first"].short()).abs()
    print(f"\n[parity] pass orders differ on {float((d > 0).float().mean()):.4%} of values, max {int(d.max())}")
    assert int(d.max()) == 1 and bool((d > 0).any())
    with pytest.raises(ValueError, match="pass order"):
        resampling.set_pass_order("pillow14")


def test_pass_order_from_the_pillow_version():
    from chute import resampling

    assert resampling.order_for_pillow("13.0.0") == "pillow13"
    assert resampling.order_for_pillow("14.1.0.dev0") == "pillow13"
    assert resampling.order_for_pillow("12.3.0") == "horizontal_first"
    assert resampling.order_for_pillow("11.3.0") == "horizontal_first"
    assert resampling.order_for_pillow("9.5.0.post1") == "horizontal_first"  # pillow-simd's numbering
