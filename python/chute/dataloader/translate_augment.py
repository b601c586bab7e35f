"""torchvision's augmentations -> chute's (the pixel stage and RandomErasing), with their parameters: the part
of translate.py that maps one transform, given where it stands in the Compose.

``pixel_stage(t, name, family, stage)`` gives chute's twin of an AutoAugment, RandAugment, TrivialAugmentWide,
AugMix, ColorJitter, RandomGrayscale, GaussianBlur, RandomRotation or RandomAffine (v1 or v2): ``backend`` is
where it stands (``"pil"`` on the PIL image, ``"tensor"`` on the uint8 tensor after ``PILToTensor``/
``ToImage`` or from ``decode_image``), ``api`` the family. ``random_erasing(t)`` gives chute's
RandomErasing. Both raise ValueError (or TypeError) with the reason when a parameter is one chute cannot
honour; translate.py turns that into the Fallback naming the transform.
"""

from __future__ import annotations

import numbers

from chute.augment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from chute.random_transforms import (
    ColorJitter,
    GaussianBlur,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomRotation,
)

PIXEL_STAGE = frozenset(
    (
        "AutoAugment",
        "RandAugment",
        "TrivialAugmentWide",
        "AugMix",
        "ColorJitter",
        "RandomGrayscale",
        "GaussianBlur",
        "RandomRotation",
        "RandomAffine",
    )
)


def _fill(t):
    """torchvision's ``fill`` attribute; v2 also takes a dict of fills per input type, which chute's one
    image type cannot take apart."""
    fill = getattr(t, "fill", None)
    if isinstance(fill, dict):
        raise ValueError(f"fill={fill!r} is a dict of fills per input type: chute takes one fill for the image")
    return fill


def pixel_stage(t, name: str, family: str, stage: str):
    """chute's twin of torchvision's `t` (class `name`, "v1" or "v2") on the resized image at `stage`
    ("pil" or "uint8")."""
    backend = "pil" if stage == "pil" else "tensor"
    options = {"backend": backend, "api": family}
    if name == "AutoAugment":
        return AutoAugment(t.policy, t.interpolation, _fill(t), **options)
    if name == "RandAugment":
        return RandAugment(t.num_ops, t.magnitude, t.num_magnitude_bins, t.interpolation, _fill(t), **options)
    if name == "TrivialAugmentWide":
        return TrivialAugmentWide(t.num_magnitude_bins, t.interpolation, _fill(t), **options)
    if name == "AugMix":  # torch's arithmetic on either input, as torchvision's
        return AugMix(
            t.severity, t.mixture_width, t.chain_depth, t.alpha, t.all_ops, t.interpolation, _fill(t), api=family
        )
    if name == "ColorJitter":  # torchvision keeps None for a factor that stays at its identity
        ranges = [getattr(t, k) for k in ("brightness", "contrast", "saturation", "hue")]
        return ColorJitter(*[0 if r is None else list(r) for r in ranges], **options)
    if name == "RandomGrayscale":
        return RandomGrayscale(t.p, **options)
    if name == "GaussianBlur":  # a tensor operation on either input, as torchvision's
        return GaussianBlur(tuple(t.kernel_size), tuple(t.sigma), api=family)
    if name == "RandomRotation":
        if t.expand:
            raise ValueError("expand=True changes the image size per sample: chute keeps the output size")
        return RandomRotation(t.degrees, t.interpolation, False, t.center, _fill(t), **options)
    if name == "RandomAffine":
        return RandomAffine(t.degrees, t.translate, t.scale, t.shear, t.interpolation, _fill(t), t.center, **options)
    raise AssertionError(name)


def random_erasing(t, family: str) -> RandomErasing:
    """chute's RandomErasing for torchvision's on a float32 tensor in [0, 1] (before Normalize) or normalised
    (after it). v2 keeps ``value`` as a list of floats, None for ``'random'``."""
    value = t.value
    if family == "v2":
        value = "random" if value is None else value[0] if len(value) == 1 else tuple(value)
    elif not isinstance(value, (numbers.Number, str, tuple, list)):
        raise TypeError(f"value={value!r} is not a number, a sequence or 'random'")
    return RandomErasing(t.p, tuple(t.scale), tuple(t.ratio), value, t.inplace)
