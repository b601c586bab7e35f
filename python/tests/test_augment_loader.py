"""The augmentations through chute.Loader: each sample's pixels are those of torchvision's pipeline on the
PIL image (chute.bench.pil_reference for the crop, chute.bench.augment_reference for the ops) given the
sample's own draws (chute._native.sample_draws); where the flip happens; the output writer's erasing; the
argument errors a torchvision user expects; determinism across thread counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import chute
from chute import _native
from chute.bench import augment_policy_reference as policies
from chute.bench import augment_reference as F
from chute.bench import pil_reference as R

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SEED = 23


def replay(path, transforms, index: int, size: int, seed: int = SEED) -> np.ndarray:
    """The sample as torchvision's pipeline makes it on the PIL image, with chute's draws: the crop, the
    flip where the list puts it, each pixel-stage step's ops (or AugMix's mix)."""
    original = R.pil_loader(path)
    natives = [t._to_native() for t in transforms]
    x, y, w, h = _native.random_resized_crop_box(original.width, original.height, natives[0], seed, 0, index)
    img = R.resized_crop(original, y, x, h, w, (size, size))
    draws = _native.sample_draws(natives, original.width, original.height, seed, 0, index)
    augmix = [t for t in transforms if isinstance(t, chute.AugMix)]
    for step in draws["steps"]:
        if "flip" in step:
            if draws["flip"]:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        elif "augmix" in step:
            t = augmix.pop(0)
            img = policies.AugMix(t.severity, t.mixture_width, t.chain_depth, t.alpha, t.all_ops).mix(
                img, step["augmix"]
            )
        else:
            for op in step["ops"]:
                img = F.pixel_op(img, **op)
    if draws["writer_flips"]:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(img)


def batch_hwc(loader) -> np.ndarray:
    ((images, _),) = list(loader)
    return images.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize(
    "augment",
    [
        [chute.TrivialAugmentWide()],
        [chute.RandAugment(num_ops=3, magnitude=12, interpolation="bilinear", fill=(30, 60, 90))],
        [chute.AutoAugment(chute.AutoAugmentPolicy.CIFAR10)],
        [chute.AugMix(severity=5)],
        [chute.ColorJitter(0.4, 0.4, 0.4, 0.1), chute.RandomGrayscale(0.3)],
        [chute.RandomAffine(20, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=8)],
        [chute.RandomRotation(30, interpolation="bilinear", fill=(255, 0, 0), center=(10, 20))],
        [chute.RandomAffine(10), chute.GaussianBlur(5)],
    ],
    ids=["taw", "randaugment", "autoaugment", "augmix", "jitter", "affine", "rotation", "blur"],
)
def test_augmented_samples_are_torchvisions_pipeline_on_pil_images(folder, augment):
    """Bit for bit, but GaussianBlur: torch's conv2d sums in its own order, one level apart at most on a
    few values (docs/AUGMENT.md)."""
    blur = any(isinstance(t, chute.GaussianBlur) for t in augment)
    source = chute.ImageFolder(folder)
    transforms = [chute.RandomResizedCrop(48), chute.RandomHorizontalFlip(), *augment]
    loader = chute.Loader(source, batch_size=len(source), seed=SEED, transforms=transforms)
    differing = 0
    for index, (out, (path, _)) in enumerate(zip(batch_hwc(loader), source.samples)):
        d = np.abs(out.astype(int) - replay(path, transforms, index, 48).astype(int))
        assert d.max() <= (1 if blur else 0), index
        differing += int((d > 0).sum())
    assert differing <= 1e-3 * len(source) * 48 * 48 * 3


@pytest.mark.parametrize("flip_first", [True, False])
def test_the_flip_happens_where_the_list_puts_it(folder, flip_first):
    """A quarter turn before and after the flip differ: chute flips before the ops that follow the flip,
    after those that precede it (the writer's flip)."""
    source = chute.ImageFolder(folder)
    turn = chute.RandomRotation((90, 90))
    flip = chute.RandomHorizontalFlip(1.0)
    transforms = [chute.RandomResizedCrop(40), flip, turn] if flip_first else [chute.RandomResizedCrop(40), turn, flip]
    loader = chute.Loader(source, batch_size=len(source), seed=SEED, transforms=transforms)
    out = batch_hwc(loader)
    for index, (path, _) in enumerate(source.samples[:6]):
        img = R.pil_loader(path)
        x, y, w, h = _native.random_resized_crop_box(img.width, img.height, transforms[0]._to_native(), SEED, 0, index)
        img = R.resized_crop(img, y, x, h, w, (40, 40))
        mirror = Image.Transpose.FLIP_LEFT_RIGHT
        want = img.transpose(mirror).rotate(90) if flip_first else img.rotate(90).transpose(mirror)
        assert np.array_equal(out[index], np.asarray(want))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_erasing_after_normalize_erases_normalised_values(folder, dtype):
    """The reference recipe's tail: Normalize, then RandomErasing(value=0) on the normalised tensor; erasing
    before Normalize erases [0, 1] values, normalised after."""
    source = chute.ImageFolder(folder)
    rrc = chute.RandomResizedCrop(32)
    for erase_first in (False, True):
        erasing = chute.RandomErasing(p=1.0, value=(0.5, 0.25, 1.0) if erase_first else 0)
        tail = [erasing, chute.Normalize(MEAN, STD)] if erase_first else [chute.Normalize(MEAN, STD), erasing]
        transforms = [rrc, chute.TrivialAugmentWide(), *tail]
        loader = chute.Loader(source, batch_size=len(source), seed=SEED, transforms=transforms, dtype=dtype)
        ((images, _),) = list(loader)
        for index, (path, _) in enumerate(source.samples[:8]):
            pixels = replay(path, transforms[:2], index, 32)
            draws = _native.sample_draws([t._to_native() for t in transforms], *R.pil_loader(path).size, SEED, 0, index)
            want = (
                torch.from_numpy(pixels.copy()).permute(2, 0, 1).float() / 255 - torch.tensor(MEAN).view(3, 1, 1)
            ) / torch.tensor(STD).view(3, 1, 1)
            if draws["erasing"][0] is not None:
                top, left, h, w = draws["erasing"][0]
                value = torch.tensor(erasing.value if erase_first else [0.0, 0.0, 0.0]).view(3, 1, 1).expand(3, h, w)
                if erase_first:
                    value = (value - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
                want[:, top : top + h, left : left + w] = value
            assert torch.equal(images[index], want.to(dtype)), (erase_first, index)
        assert any(d is not None for d in _native.transform_draws(erasing._to_native(), 32, 32, SEED, 0, 0, 8))


def test_random_erasing_random_values_are_standard_normals(folder):
    source = chute.ImageFolder(folder)
    transforms = [
        chute.RandomResizedCrop(64),
        chute.Normalize(MEAN, STD),
        chute.RandomErasing(p=1.0, scale=(0.3, 0.3), ratio=(1, 1), value="random"),
    ]
    loader = chute.Loader(source, batch_size=len(source), seed=SEED, transforms=transforms, dtype=torch.float32)
    ((images, _),) = list(loader)
    erased = []
    for index, (path, _) in enumerate(source.samples):
        draws = _native.sample_draws([t._to_native() for t in transforms], *R.pil_loader(path).size, SEED, 0, index)
        top, left, h, w = draws["erasing"][0]
        erased.append(images[index, :, top : top + h, left : left + w].reshape(-1))
    values = torch.cat(erased)
    assert abs(values.mean().item()) < 0.02 and abs(values.std().item() - 1) < 0.02


def test_augmentation_is_deterministic_whatever_the_threads(folder):
    source = chute.ImageFolder(folder)
    transforms = [chute.RandomResizedCrop(40), chute.RandomHorizontalFlip(), chute.AugMix(), chute.TrivialAugmentWide(),
                  chute.Normalize(MEAN, STD), chute.RandomErasing(value="random")]  # fmt: skip
    runs = []
    for threads in (1, 2, 3):
        loader = chute.Loader(
            source, batch_size=8, seed=4, transforms=transforms, dtype=torch.float32, num_threads=threads
        )
        runs.append(torch.cat([images for images, _ in loader]))
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_where_augmentations_may_stand(folder):
    source = chute.ImageFolder(folder)
    rrc = chute.RandomResizedCrop(32)
    for transforms, message in [
        ([chute.TrivialAugmentWide(), rrc], "must come before the augmentations"),
        ([chute.Resize(40), chute.AugMix(), chute.CenterCrop(32)], "must come before the augmentations"),
        ([rrc, chute.RandomErasing(), chute.ColorJitter(0.1)], "RandomErasing acts on the output"),
        ([rrc, chute.Normalize(MEAN, STD), chute.TrivialAugmentWide()], "Normalize must be the last"),
        ([chute.RandomResizedCrop(8), chute.GaussianBlur(17)], "reflection padding"),
    ]:
        with pytest.raises(ValueError, match=message):
            chute.Loader(source, 4, transforms=transforms, dtype=torch.float32)


def test_argument_errors_are_torchvisions():
    with pytest.raises(ValueError, match=r"The severity must be between \[1, 10\]. Got 11 instead."):
        chute.AugMix(severity=11)
    with pytest.raises(ValueError, match="The provided policy"):
        chute.AutoAugment("imagenet21k")
    with pytest.raises(ValueError, match="If brightness is a single number, it must be non negative."):
        chute.ColorJitter(brightness=-1)
    with pytest.raises(ValueError, match=r"hue values should be between \(-0.5, 0.5\)"):
        chute.ColorJitter(hue=0.7)
    with pytest.raises(TypeError, match="contrast should be a single number or a list/tuple with length 2."):
        chute.ColorJitter(contrast=(1, 2, 3))
    with pytest.raises(ValueError, match="Kernel size value should be an odd and positive number."):
        chute.GaussianBlur(4)
    with pytest.raises(ValueError, match="sigma values should be positive and of the form"):
        chute.GaussianBlur(3, sigma=(2.0, 1.0))
    with pytest.raises(ValueError, match="If degrees is a single number, it must be positive."):
        chute.RandomRotation(-5)
    with pytest.raises(ValueError, match="degrees should be a sequence of length 2."):
        chute.RandomRotation([1, 2, 3])
    with pytest.raises(ValueError, match="translation values should be between 0 and 1"):
        chute.RandomAffine(0, translate=(0.5, 1.5))
    with pytest.raises(ValueError, match="scale values should be positive"):
        chute.RandomAffine(0, scale=(0, 1))
    with pytest.raises(ValueError, match="shear should be a sequence of length 2 or 4."):
        chute.RandomAffine(0, shear=(1, 2, 3))
    with pytest.raises(ValueError, match="If value is str, it should be 'random'"):
        chute.RandomErasing(value="noise")
    with pytest.raises(ValueError, match="Random erasing probability should be between 0 and 1"):
        chute.RandomErasing(p=1.5)
    with pytest.raises(ValueError, match="Scale should be between 0 and 1"):
        chute.RandomErasing(scale=(0.5, 2))
    with pytest.raises(TypeError, match="Argument value should be either a number or str or a sequence"):
        chute.RandomErasing(value={1})
    with pytest.raises(ValueError, match="does not match the number of channels"):
        chute.TrivialAugmentWide(fill=(1, 2))
    with pytest.raises(ValueError, match="NEAREST and BILINEAR"):
        chute.RandAugment(interpolation="bicubic")
    with pytest.raises(ValueError, match="expand=True"):
        chute.RandomRotation(10, expand=True)
    with pytest.raises(ValueError, match="magnitude"):
        chute.RandAugment(magnitude=31)


def test_torchvision_arguments_and_constants_are_accepted():
    assert chute.TrivialAugmentWide(interpolation=2).interpolation is chute.InterpolationMode.BILINEAR  # PIL's
    assert chute.AutoAugment(policy=chute.AutoAugmentPolicy.SVHN).policy is chute.AutoAugmentPolicy.SVHN
    assert chute.RandomRotation(10).fill == (0.0, 0.0, 0.0)  # torchvision's default fill there is 0
    assert chute.TrivialAugmentWide().fill is None
    assert chute.ColorJitter().brightness is None  # every factor at its centre: nothing drawn
    assert chute.ColorJitter(brightness=0.5).brightness == (0.5, 1.5)
    assert chute.RandomAffine(degrees=10, shear=5).shear == [-5.0, 5.0]
    assert "TrivialAugmentWide(num_magnitude_bins=31" in repr(chute.TrivialAugmentWide())


def test_device_delivery_refuses_random_erasing(folder):
    """Device delivery normalises on the GPU; the erasing would land in uint8 pixels, not in the normalised
    tensor: refused, with the way out."""
    transforms = [chute.RandomResizedCrop(32), chute.Normalize(MEAN, STD), chute.RandomErasing()]
    with pytest.raises(ValueError, match="RandomErasing acts on the output tensor"):
        chute.Loader(chute.ImageFolder(folder), 4, transforms=transforms, dtype=torch.float32, device="sim")
    loader = chute.Loader(
        chute.ImageFolder(folder), 4, transforms=transforms[:1] + [chute.TrivialAugmentWide()], device="sim"
    )
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, 32, 32)
    loader.close()
