"""The automatic augmentation policies with torchvision's names, arguments and semantics, run natively:
``AutoAugment`` (ImageNet, CIFAR10 and SVHN policies), ``RandAugment``, ``TrivialAugmentWide``, ``AugMix``.

They act on the resized image, after ``RandomResizedCrop``/``Resize``/``CenterCrop`` (and after a
``RandomHorizontalFlip`` that precedes them), before ``Normalize``: the engine's pixel stage
(docs/AUGMENT.md). Each sample's draws (which op, which magnitude bin, the sign, the probabilities) follow
torchvision's distribution from chute's per-sample random stream, keyed by (seed, epoch, sample index):
the same seed gives the same images whatever the thread count.

The pixels are those of torchvision's own implementation of each op: Pillow's arithmetic, bit for bit,
where torchvision runs the policy on a PIL image (the reference recipes; ``backend="pil"``, the default),
torch's float32 arithmetic on a uint8 tensor (``backend="tensor"``: the policy after a ``PILToTensor``;
always for ``AugMix``, which torchvision runs on tensors even for PIL input). ``chute._native.augment_op``
applies one op, ``chute._native.sample_draws`` shows a sample's draws.

``api="v2"`` follows torchvision.transforms.v2's arithmetic where it differs from v1's (the affine matrix;
on tensors the fused blends, sharpness, autocontrast, bilinear fill and blur kernel; Solarize's threshold as
a fraction of 255). The arguments shared with the random transforms (``interpolation``, ``fill``,
``backend``, ``api``) are parsed here.
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Sequence

from chute import _native, _validate


class InterpolationMode(enum.Enum):
    """The interpolations chute's pixel stage implements, with torchvision's names and values (torchvision's
    own ``InterpolationMode`` and Pillow's integer constants are accepted too)."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"


class AutoAugmentPolicy(enum.Enum):
    """AutoAugment's learned policies (torchvision's ``AutoAugmentPolicy``; its members are accepted too)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


_PIL_INTERPOLATIONS = {0: "nearest", 2: "bilinear"}  # PIL.Image.NEAREST, PIL.Image.BILINEAR


def parse_interpolation(value, name: str) -> str:
    """``'nearest'`` or ``'bilinear'`` from torchvision's or chute's ``InterpolationMode``, a Pillow constant
    or a string; other interpolations are a ValueError naming the transform."""
    mode = getattr(value, "value", value)
    if isinstance(mode, numbers.Integral) and not isinstance(mode, bool):
        mode = _PIL_INTERPOLATIONS.get(int(mode), mode)
    if isinstance(mode, str) and mode.lower() in ("nearest", "bilinear"):
        return mode.lower()
    raise ValueError(f"{name}: chute implements interpolation NEAREST and BILINEAR, got {value!r}")


def parse_fill(value, name: str) -> tuple[float, float, float] | None:
    """torchvision's ``fill``: None, a number, or a sequence of 1 or 3 numbers (one per RGB channel)."""
    if value is None:
        return None
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name}: fill should be either a sequence or a number, got {value!r}")
    if len(value) == 1:
        value = list(value) * 3
    if len(value) != 3:
        raise ValueError(
            f"{name}: the number of elements in 'fill' does not match the number of channels of the image "
            f"({len(value)} != 3)"
        )
    return tuple(_validate.real(f"{name}: fill[{i}]", v) for i, v in enumerate(value))


def parse_backend(value, name: str) -> str:
    """Which of torchvision's implementations the pixels follow: ``'pil'`` (the transform applied to a PIL
    image) or ``'tensor'`` (applied to a uint8 tensor)."""
    if value not in ("pil", "tensor"):
        raise ValueError(f"{name}: backend must be 'pil' or 'tensor', got {value!r}")
    return value


def parse_api(value, name: str) -> str:
    """Which torchvision API's arithmetic: ``'v1'`` (torchvision.transforms) or ``'v2'``
    (torchvision.transforms.v2, whose affine matrix and tensor kernels round differently)."""
    if value not in ("v1", "v2"):
        raise ValueError(f"{name}: api must be 'v1' or 'v2', got {value!r}")
    return value


def _int(name: str, value, lo: int) -> int:
    return _validate.integer(name, value, lo, _validate.INT32_MAX)


class PixelTransform:
    """What the pixel-stage transforms share: torchvision's ``interpolation`` and ``fill`` where they take
    them, chute's ``backend`` and ``api``; parsed once here, handed to the native struct by keyword."""

    _PARSERS = {
        "interpolation": lambda v, name: InterpolationMode(parse_interpolation(v, name)),
        "fill": parse_fill,
        "backend": parse_backend,
        "api": parse_api,
    }

    def _parse_options(self, name: str, **options) -> None:
        for key, value in options.items():
            setattr(self, key, self._PARSERS[key](value, name))

    def _native_options(self) -> dict:
        """The shared options this transform has, as the native constructors take them."""
        options = {key: getattr(self, key) for key in self._PARSERS if hasattr(self, key)}
        if "interpolation" in options:
            options["interpolation"] = options["interpolation"].value
        return options


class AutoAugment(PixelTransform):
    """One of the policy's 25 sub-policies per sample; each of its two ops applies with its probability."""

    def __init__(
        self, policy=AutoAugmentPolicy.IMAGENET, interpolation="nearest", fill=None, *, backend="pil", api="v1"
    ):
        value = getattr(policy, "value", policy)
        if value not in ("imagenet", "cifar10", "svhn"):
            raise ValueError(f"The provided policy {policy} is not recognized.")
        self.policy = AutoAugmentPolicy(value)
        self._parse_options("AutoAugment", interpolation=interpolation, fill=fill, backend=backend, api=api)

    def _to_native(self):
        return _native.AutoAugment(policy=self.policy.value, **self._native_options())

    def __repr__(self) -> str:
        return f"AutoAugment(policy={self.policy}, fill={self.fill})"


class RandAugment(PixelTransform):
    """``num_ops`` ops uniform over 14 per sample, all at bin ``magnitude`` of ``num_magnitude_bins``."""

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation="nearest",
        fill=None,
        *,
        backend: str = "pil",
        api: str = "v1",
    ):
        self.num_ops = _int("RandAugment: num_ops", num_ops, 0)
        self.num_magnitude_bins = _int("RandAugment: num_magnitude_bins", num_magnitude_bins, 2)
        self.magnitude = _validate.integer("RandAugment: magnitude", magnitude, 0, self.num_magnitude_bins - 1)
        self._parse_options("RandAugment", interpolation=interpolation, fill=fill, backend=backend, api=api)

    def _to_native(self):
        return _native.RandAugment(
            num_ops=self.num_ops,
            magnitude=self.magnitude,
            num_magnitude_bins=self.num_magnitude_bins,
            **self._native_options(),
        )

    def __repr__(self) -> str:
        return (
            f"RandAugment(num_ops={self.num_ops}, magnitude={self.magnitude}, "
            f"num_magnitude_bins={self.num_magnitude_bins}, interpolation={self.interpolation}, fill={self.fill})"
        )


class TrivialAugmentWide(PixelTransform):
    """One op uniform over 14 per sample, its magnitude bin uniform over ``num_magnitude_bins`` wide ranges."""

    def __init__(
        self, num_magnitude_bins: int = 31, interpolation="nearest", fill=None, *, backend: str = "pil", api: str = "v1"
    ):
        self.num_magnitude_bins = _int("TrivialAugmentWide: num_magnitude_bins", num_magnitude_bins, 2)
        self._parse_options("TrivialAugmentWide", interpolation=interpolation, fill=fill, backend=backend, api=api)

    def _to_native(self):
        return _native.TrivialAugmentWide(num_magnitude_bins=self.num_magnitude_bins, **self._native_options())

    def __repr__(self) -> str:
        return (
            f"TrivialAugmentWide(num_magnitude_bins={self.num_magnitude_bins}, "
            f"interpolation={self.interpolation}, fill={self.fill})"
        )


class AugMix(PixelTransform):
    """``mixture_width`` chains of 1-3 (or ``chain_depth``) ops mixed with Dirichlet and Beta weights, in
    torch's float32 arithmetic (torchvision runs AugMix on tensors)."""

    def __init__(
        self,
        severity: int = 3,
        mixture_width: int = 3,
        chain_depth: int = -1,
        alpha: float = 1.0,
        all_ops: bool = True,
        interpolation="bilinear",
        fill=None,
        *,
        api: str = "v1",
    ):
        if not isinstance(severity, numbers.Integral) or isinstance(severity, bool):
            raise TypeError(f"AugMix: severity must be an int, got {severity!r}")
        if not 1 <= severity <= 10:
            raise ValueError(f"The severity must be between [1, 10]. Got {severity} instead.")
        self.severity = int(severity)
        self.mixture_width = _int("AugMix: mixture_width", mixture_width, 1)
        self.chain_depth = _validate.integer(
            "AugMix: chain_depth", chain_depth, -_validate.INT32_MAX, _validate.INT32_MAX
        )
        self.alpha = _validate.real("AugMix: alpha", alpha, 0.0)
        if self.alpha == 0.0:
            raise ValueError("AugMix: alpha must be positive, got 0.0")
        self.all_ops = bool(all_ops)
        self._parse_options("AugMix", interpolation=interpolation, fill=fill, api=api)  # always tensors

    def _to_native(self):
        return _native.AugMix(
            severity=self.severity,
            mixture_width=self.mixture_width,
            chain_depth=self.chain_depth,
            alpha=self.alpha,
            all_ops=self.all_ops,
            **self._native_options(),
        )

    def __repr__(self) -> str:
        return (
            f"AugMix(severity={self.severity}, mixture_width={self.mixture_width}, chain_depth={self.chain_depth}, "
            f"alpha={self.alpha}, all_ops={self.all_ops}, interpolation={self.interpolation}, fill={self.fill})"
        )
