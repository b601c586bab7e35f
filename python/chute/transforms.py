"""Transforms with torchvision's names, arguments and semantics, run natively.

They are descriptions: the engine composes the geometric ones (RandomResizedCrop, Resize, CenterCrop)
into one decode window and one resampling per image, then flips and normalises while writing the
output. Resizing is PIL's antialiased bilinear, which is what torchvision uses on PIL images, with the
installed Pillow's order of passes (chute/resampling.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from chute import _native, _validate


def _size_pair(size, name: str) -> tuple[int, int]:
    """torchvision's convention: an int means (size, size); a sequence is (height, width). Each side is a
    positive C int."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        sides = (size, size)
    elif isinstance(size, Sequence) and not isinstance(size, str) and len(size) in (1, 2):
        sides = (size[0], size[-1])
    else:
        raise TypeError(f"{name}: size must be an int or a sequence of one or two ints, got {size!r}")
    return tuple(_validate.integer(f"{name}: size", s, 1, _validate.INT32_MAX) for s in sides)


def _check_bilinear(interpolation, antialias, name: str) -> None:
    mode = getattr(interpolation, "value", interpolation)
    if str(mode).lower() not in ("bilinear", "2"):
        raise ValueError(f"{name}: chute resizes with antialiased bilinear only, got interpolation={interpolation!r}")
    if antialias is False:
        raise ValueError(f"{name}: chute always antialiases (as torchvision does on PIL images)")


class RandomResizedCrop:
    """Crop a random area and aspect ratio, then resize to ``size`` (torchvision's sampling, fallback included)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation="bilinear", antialias=True):
        self.size = _size_pair(size, "RandomResizedCrop")
        scale = _validate.reals("RandomResizedCrop: scale", scale, 2)
        ratio = _validate.reals("RandomResizedCrop: ratio", ratio, 2)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError("RandomResizedCrop: scale and ratio should be of kind (min, max)")
        _check_bilinear(interpolation, antialias, "RandomResizedCrop")
        self.scale = scale
        self.ratio = ratio

    def _to_native(self):
        (scale_min, scale_max), (ratio_min, ratio_max) = self.scale, self.ratio
        return _native.RandomResizedCrop(
            self.size[0],
            self.size[1],
            scale_min=scale_min,
            scale_max=scale_max,
            ratio_min=ratio_min,
            ratio_max=ratio_max,
        )

    def __repr__(self) -> str:
        return (
            f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)})"
        )


class Resize:
    """``Resize(int)`` sets the shorter side (the longer one becomes ``int(size * long / short)``);
    ``Resize((h, w))`` sets both."""

    def __init__(self, size, interpolation="bilinear", max_size=None, antialias=True):
        if max_size is not None:
            raise ValueError("Resize: max_size is not supported")
        _check_bilinear(interpolation, antialias, "Resize")
        if isinstance(size, numbers.Integral) or (isinstance(size, Sequence) and len(size) == 1):
            self.size = _size_pair(size, "Resize")[0]
        else:
            self.size = _size_pair(size, "Resize")

    def _to_native(self):
        if isinstance(self.size, int):
            return _native.Resize(self.size, 0)
        return _native.Resize(self.size[0], self.size[1])

    def __repr__(self) -> str:
        return f"Resize(size={self.size})"


class CenterCrop:
    """Crop the centre; the top edge is ``int(round((H - h) / 2))``, as in torchvision."""

    def __init__(self, size):
        self.size = _size_pair(size, "CenterCrop")

    def _to_native(self):
        return _native.CenterCrop(self.size[0], self.size[1])

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5):
        self.p = _validate.real("RandomHorizontalFlip: p", p, 0.0, 1.0)

    def _to_native(self):
        return _native.RandomHorizontalFlip(self.p)

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class Normalize:
    """``(x / 255 - mean) / std`` per channel, in float32: torchvision's ``ToTensor`` + ``Normalize``."""

    def __init__(self, mean, std, inplace: bool = False):
        mean = _validate.reals("Normalize: mean", mean, 3)  # one per RGB channel
        std = _validate.reals("Normalize: std", std, 3)
        if any(s == 0 or math.isnan(s) for s in std):
            raise ValueError(f"Normalize: std evaluated to zero or NaN: {std}")
        self.mean, self.std = mean, std

    def _to_native(self):
        return _native.Normalize(list(self.mean), list(self.std))

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


def _follow_installed_pillow() -> None:
    from chute import resampling

    resampling.follow_installed_pillow()  # resize with the installed Pillow's arithmetic (see resampling.py)


_follow_installed_pillow()
