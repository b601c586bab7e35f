"""torchvision.transforms.v2's MixUp, CutMix and RandomChoice, transcribed: the reference chute's batch
transforms are tested against where torchvision does not import (the main venv), beside
:mod:`chute.bench.pil_reference`'s ImageFolder and v1 transforms.

The arithmetic, the checks and the random draws are torchvision 0.29's (``transforms/v2/_augment.py``,
``_container.py``, ``_utils.py``), on a batch ``(images, labels)`` as ``default_collate`` gives it:
:func:`mixup` and :func:`cutmix` with given draws (the formula chute's engine must reproduce bit for bit),
and the classes that draw them from torch's RNG as torchvision does.

* :func:`as_torchvision` gives the classes as chute's DataLoader recognises torchvision's: subclasses whose
  ``__module__`` is torchvision's (``torchvision.transforms.v2._augment``, ``._container``), with the default
  labels getter under its torchvision name.
* :func:`real_torchvision` gives torchvision's own, where it imports.
"""

from __future__ import annotations

import functools
import math
import types

import torch
from torch.nn.functional import one_hot

# Reproduces torchvision's classes under their names (as chute.bench.pil_reference does).
REPRODUCES_TORCHVISION = True


def mix_labels(labels: torch.Tensor, num_classes: int | None, lam: float) -> torch.Tensor:
    """torchvision's ``_BaseMixUpCutMix._mixup_label``: one-hot (index labels), float, mixed with the batch
    rolled by one."""
    if labels.ndim == 1:
        labels = one_hot(labels, num_classes=num_classes)
    if not labels.dtype.is_floating_point:
        labels = labels.float()
    return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))


def mixup(images: torch.Tensor, labels: torch.Tensor, lam: float, num_classes: int | None):
    """MixUp's output for a given ``lam``: torchvision's ``MixUp.transform`` on the images and the labels."""
    return images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam)), mix_labels(labels, num_classes, lam)


def cutmix(images: torch.Tensor, labels: torch.Tensor, box: tuple[int, int, int, int], num_classes: int | None):
    """CutMix's output for a given box ``(x1, y1, x2, y2)``: torchvision's ``CutMix.transform``, the labels
    weighted by 1 - box area / image area."""
    x1, y1, x2, y2 = box
    h, w = images.shape[-2:]
    rolled = images.roll(1, 0)
    output = images.clone()
    output[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
    lam_adjusted = float(1.0 - (x2 - x1) * (y2 - y1) / (w * h))
    return output, mix_labels(labels, num_classes, lam_adjusted)


def _find_labels_default_heuristic(inputs):
    """torchvision's default ``labels_getter`` for a batch ``(images, labels)``: its second item."""
    if isinstance(inputs, (tuple, list)):
        inputs = inputs[1]
    if isinstance(inputs, torch.Tensor):
        return inputs
    raise ValueError("could not infer where the labels are in the sample")


class _BaseMixUpCutMix:
    _labels_heuristic = staticmethod(_find_labels_default_heuristic)

    def __init__(self, *, alpha: float = 1.0, num_classes: int | None = None, labels_getter="default"):
        self.alpha = float(alpha)
        self._dist = torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha]))
        self.num_classes = num_classes
        if labels_getter == "default":
            self._labels_getter = self._labels_heuristic
        elif callable(labels_getter):
            self._labels_getter = labels_getter
        elif labels_getter is None:
            self._labels_getter = lambda _: None
        else:
            raise ValueError(f"labels_getter should either be 'default', a callable, or None, but got {labels_getter}.")

    def __call__(self, *inputs):
        inputs = inputs if len(inputs) > 1 else inputs[0]
        images = inputs[0]
        labels = self._labels_getter(inputs)
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"The labels must be a tensor, but got {type(labels)} instead.")
        if labels.ndim not in (1, 2):
            raise ValueError(
                f"labels should be of shape (batch_size,) or (batch_size, num_classes), got {labels.shape}"
            )
        if labels.ndim == 1 and self.num_classes is None:
            raise ValueError("num_classes must be passed if the labels are index-based (1D)")
        if images.ndim != 4:
            raise ValueError(f"Expected a batched input with 4 dims, but got {images.ndim} dimensions instead.")
        if images.shape[0] != labels.shape[0]:
            raise ValueError("The batch size of the image or video does not match the batch size of the labels")
        return self._mix(images, labels)


class MixUp(_BaseMixUpCutMix):
    def _mix(self, images, labels):
        lam = float(self._dist.sample(()))
        return mixup(images, labels, lam, self.num_classes)


class CutMix(_BaseMixUpCutMix):
    def _mix(self, images, labels):
        lam = float(self._dist.sample(()))
        H, W = images.shape[-2:]
        r_x = torch.randint(W, size=(1,))
        r_y = torch.randint(H, size=(1,))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half = int(r * W)
        r_h_half = int(r * H)
        x1 = int(torch.clamp(r_x - r_w_half, min=0))
        y1 = int(torch.clamp(r_y - r_h_half, min=0))
        x2 = int(torch.clamp(r_x + r_w_half, max=W))
        y2 = int(torch.clamp(r_y + r_h_half, max=H))
        return cutmix(images, labels, (x1, y1, x2, y2), self.num_classes)


class RandomChoice:
    def __init__(self, transforms, p=None):
        if not transforms:
            raise ValueError("Pass at least one transform")
        if p is None:
            p = [1] * len(transforms)
        elif len(p) != len(transforms):
            raise ValueError(f"Length of p doesn't match the number of transforms: {len(p)} != {len(transforms)}")
        self.transforms = transforms
        total = sum(p)
        self.p = [prob / total for prob in p]

    def __call__(self, *inputs):
        idx = int(torch.multinomial(torch.tensor(self.p), 1))
        return self.transforms[idx](*inputs)


_AUGMENT, _CONTAINER, _UTILS = (
    "torchvision.transforms.v2._augment",
    "torchvision.transforms.v2._container",
    "torchvision.transforms.v2._utils",
)


@functools.cache
def as_torchvision() -> types.SimpleNamespace:
    """MixUp, CutMix and RandomChoice as torchvision.transforms.v2's, to chute's DataLoader."""
    f = _find_labels_default_heuristic
    heuristic = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    heuristic.__module__ = _UTILS

    def subclass(cls, module, **members):
        return type(cls.__name__, (cls,), {"__module__": module, "__qualname__": cls.__name__, **members})

    return types.SimpleNamespace(
        MixUp=subclass(MixUp, _AUGMENT, _labels_heuristic=staticmethod(heuristic)),
        CutMix=subclass(CutMix, _AUGMENT, _labels_heuristic=staticmethod(heuristic)),
        RandomChoice=subclass(RandomChoice, _CONTAINER),
        __name__=__name__,
    )


@functools.cache
def real_torchvision() -> types.SimpleNamespace | None:
    """torchvision.transforms.v2's own MixUp, CutMix and RandomChoice, or None where torchvision does not import."""
    try:
        from torchvision.transforms import v2
    except (ImportError, OSError, RuntimeError):
        return None
    return types.SimpleNamespace(MixUp=v2.MixUp, CutMix=v2.CutMix, RandomChoice=v2.RandomChoice, __name__="torchvision")
