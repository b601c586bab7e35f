"""torchvision's random photometric and geometric transforms, run natively: ``ColorJitter``,
``RandomGrayscale``, ``GaussianBlur``, ``RandomRotation``, ``RandomAffine`` (the pixel stage, after the
resize: see chute/augment.py) and ``RandomErasing`` (on the written output tensor, after ``Normalize``
as in torchvision's recipes). Names, arguments, defaults and argument errors are torchvision's; the
parameters are drawn from chute's per-sample random stream with torchvision's distributions.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from chute import _native, _validate
from chute.augment import PixelTransform, parse_fill


def _pair(value, name: str) -> tuple[float, float]:
    return tuple(_validate.real(f"{name}[{i}]", v) for i, v in enumerate(value))


def _check_sequence(value, name: str, sizes: tuple[int, ...]) -> None:
    """torchvision's _check_sequence_input."""
    text = str(sizes[0]) if len(sizes) < 2 else " or ".join(str(s) for s in sizes)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} should be a sequence of length {text}.")
    if len(value) not in sizes:
        raise ValueError(f"{name} should be a sequence of length {text}.")


def _setup_angle(value, name: str, sizes: tuple[int, ...]) -> list[float]:
    """torchvision's _setup_angle: a number d is [-d, d]; else a sequence of the given lengths."""
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be positive.")
        value = [-value, value]
    else:
        _check_sequence(value, name, sizes)
    return [_validate.real(f"{name}[{i}]", v) for i, v in enumerate(value)]


def _ordered(values: list[float], name: str, transform: str) -> tuple[float, float]:
    if values[0] > values[1]:
        raise ValueError(f"{transform}: {name} should be of the form (min, max), got {values}")
    return values[0], values[1]


def _geometry_fill(value, name: str):
    """RandomRotation's and RandomAffine's fill: None means 0 (torchvision's default there)."""
    if value is None:
        value = 0
    elif not isinstance(value, (Sequence, numbers.Number)):
        raise TypeError("Fill should be either a sequence or a number.")
    return parse_fill(value, name)


class ColorJitter(PixelTransform):
    """Brightness, contrast, saturation and hue factors uniform in their ranges, applied in a random order."""

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0, *, backend: str = "pil", api: str = "v1"):
        self.brightness = self._check_input(brightness, "brightness")
        self.contrast = self._check_input(contrast, "contrast")
        self.saturation = self._check_input(saturation, "saturation")
        self.hue = self._check_input(hue, "hue", center=0, bound=(-0.5, 0.5), clip_first_on_zero=False)
        self._parse_options("ColorJitter", backend=backend, api=api)
        if self.hue is not None and self.backend == "tensor":
            raise ValueError("ColorJitter: hue is implemented with the PIL arithmetic only (backend='pil')")

    @staticmethod
    def _check_input(value, name, center=1, bound=(0, float("inf")), clip_first_on_zero=True):
        """torchvision's ColorJitter._check_input: the range, or None where the factor stays at `center`."""
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"If {name} is a single number, it must be non negative.")
            value = [center - float(value), center + float(value)]
            if clip_first_on_zero:
                value[0] = max(value[0], 0.0)
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            value = [float(value[0]), float(value[1])]
        else:
            raise TypeError(f"{name} should be a single number or a list/tuple with length 2.")
        if not bound[0] <= value[0] <= value[1] <= bound[1]:
            raise ValueError(f"{name} values should be between {bound}, but got {value}.")
        if value[0] == value[1] == center:
            return None
        return tuple(value)

    def _to_native(self):
        return _native.ColorJitter(
            brightness=self.brightness,
            contrast=self.contrast,
            saturation=self.saturation,
            hue=self.hue,
            **self._native_options(),
        )

    def __repr__(self) -> str:
        return (
            f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, "
            f"saturation={self.saturation}, hue={self.hue})"
        )


class RandomGrayscale(PixelTransform):
    """Grayscale (Pillow's luma in all three channels) with probability ``p``."""

    def __init__(self, p: float = 0.1, *, backend: str = "pil", api: str = "v1"):
        self.p = _validate.real("RandomGrayscale: p", p, 0.0, 1.0)
        self._parse_options("RandomGrayscale", backend=backend, api=api)

    def _to_native(self):
        return _native.RandomGrayscale(p=self.p, **self._native_options())

    def __repr__(self) -> str:
        return f"RandomGrayscale(p={self.p})"


class GaussianBlur(PixelTransform):
    """A Gaussian blur with sigma uniform in ``sigma`` (torch's float32 kernel and reflection padding)."""

    def __init__(self, kernel_size, sigma=(0.1, 2.0), *, api: str = "v1"):
        message = "Kernel size should be a tuple/list of two integers"
        if isinstance(kernel_size, numbers.Number):
            kernel_size = (int(kernel_size), int(kernel_size))
        elif isinstance(kernel_size, Sequence) and len(kernel_size) == 1:
            kernel_size = (kernel_size[0], kernel_size[0])
        elif not isinstance(kernel_size, Sequence) or len(kernel_size) != 2:
            raise ValueError(message)
        for ks in kernel_size:
            if not isinstance(ks, numbers.Integral) or ks <= 0 or ks % 2 == 0:
                raise ValueError("Kernel size value should be an odd and positive number.")
        self.kernel_size = (int(kernel_size[0]), int(kernel_size[1]))
        if isinstance(sigma, numbers.Number):
            if sigma <= 0:
                raise ValueError("If sigma is a single number, it must be positive.")
            sigma = (sigma, sigma)
        elif isinstance(sigma, Sequence) and len(sigma) == 2:
            if not 0.0 < sigma[0] <= sigma[1]:
                raise ValueError("sigma values should be positive and of the form (min, max).")
        else:
            raise ValueError("sigma should be a single number or a list/tuple with length 2.")
        self.sigma = _pair(sigma, "GaussianBlur: sigma")
        self._parse_options("GaussianBlur", api=api)  # always tensors

    def _to_native(self):
        # kernel_size is (x, y) as torchvision's F.gaussian_blur reads it
        return _native.GaussianBlur(
            kernel_width=self.kernel_size[0],
            kernel_height=self.kernel_size[1],
            sigma_min=self.sigma[0],
            sigma_max=self.sigma[1],
            **self._native_options(),
        )

    def __repr__(self) -> str:
        return f"GaussianBlur(kernel_size={self.kernel_size}, sigma={self.sigma})"


class RandomRotation(PixelTransform):
    """A rotation by an angle uniform in ``degrees`` (counter-clockwise), the output size kept."""

    def __init__(self, degrees, interpolation="nearest", expand=False, center=None, fill=0, *, backend="pil", api="v1"):
        self.degrees = _ordered(_setup_angle(degrees, "degrees", (2,)), "degrees", "RandomRotation")
        if center is not None:
            _check_sequence(center, "center", (2,))
            center = _pair(center, "RandomRotation: center")
        if expand:
            raise ValueError("RandomRotation: expand=True changes each image's size; chute batches one size")
        self.center = center
        self.expand = False
        self._parse_options("RandomRotation", interpolation=interpolation, backend=backend, api=api)
        self.fill = _geometry_fill(fill, "RandomRotation")

    def _to_native(self):
        return _native.RandomRotation(degrees=self.degrees, center=self.center, **self._native_options())

    def __repr__(self) -> str:
        return (
            f"RandomRotation(degrees={list(self.degrees)}, interpolation={self.interpolation.value}, "
            f"expand=False, center={self.center}, fill={self.fill})"
        )


class RandomAffine(PixelTransform):
    """An affine transformation about the centre: angle, translation, scale and shear drawn per sample."""

    def __init__(
        self,
        degrees,
        translate=None,
        scale=None,
        shear=None,
        interpolation="nearest",
        fill=0,
        center=None,
        *,
        backend: str = "pil",
        api: str = "v1",
    ):
        self.degrees = _ordered(_setup_angle(degrees, "degrees", (2,)), "degrees", "RandomAffine")
        if translate is not None:
            _check_sequence(translate, "translate", (2,))
            for t in translate:
                if not (0.0 <= t <= 1.0):
                    raise ValueError("translation values should be between 0 and 1")
            translate = _pair(translate, "RandomAffine: translate")
        self.translate = translate
        if scale is not None:
            _check_sequence(scale, "scale", (2,))
            for s in scale:
                if s <= 0:
                    raise ValueError("scale values should be positive")
            scale = _ordered(list(_pair(scale, "RandomAffine: scale")), "scale", "RandomAffine")
        self.scale = scale
        self.shear = None if shear is None else _setup_angle(shear, "shear", (2, 4))
        self._parse_options("RandomAffine", interpolation=interpolation, backend=backend, api=api)
        self.fill = _geometry_fill(fill, "RandomAffine")
        if center is not None:
            _check_sequence(center, "center", (2,))
            center = _pair(center, "RandomAffine: center")
        self.center = center
        if self.shear is not None:
            _ordered(self.shear[:2], "shear", "RandomAffine")
            if len(self.shear) == 4:
                _ordered(self.shear[2:], "shear", "RandomAffine")

    def _to_native(self):
        shear_x = None if self.shear is None else tuple(self.shear[:2])
        shear_y = None if self.shear is None or len(self.shear) < 4 else tuple(self.shear[2:])
        return _native.RandomAffine(
            degrees=self.degrees,
            translate=self.translate,
            scale=self.scale,
            shear_x=shear_x,
            shear_y=shear_y,
            center=self.center,
            **self._native_options(),
        )

    def __repr__(self) -> str:
        return (
            f"RandomAffine(degrees={list(self.degrees)}, translate={self.translate}, scale={self.scale}, "
            f"shear={self.shear}, interpolation={self.interpolation.value}, fill={self.fill}, center={self.center})"
        )


class RandomErasing:
    """Erases a random rectangle of the output tensor with probability ``p``: ``value`` 0, a value per
    channel, or ``'random'`` (a standard normal per element), in the tensor's units where it stands in the
    list: after ``Normalize`` (the recipes) the normalised values, before it [0, 1] (then normalised), for
    uint8 output pixel levels."""

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        if not isinstance(value, (numbers.Number, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(scale, Sequence):
            raise TypeError("Scale should be a sequence")
        if not isinstance(ratio, Sequence):
            raise TypeError("Ratio should be a sequence")
        scale, ratio = _pair(scale, "RandomErasing: scale"), _pair(ratio, "RandomErasing: ratio")
        if (scale[0] > scale[1]) or (ratio[0] > ratio[1]):
            raise ValueError("Scale and ratio should be of kind (min, max)")
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        if ratio[0] <= 0:
            raise ValueError("RandomErasing: ratio should be positive")
        if p < 0 or p > 1:
            raise ValueError("Random erasing probability should be between 0 and 1")
        if isinstance(value, (tuple, list)) and len(value) not in (1, 3):
            raise ValueError(
                "If value is a sequence, it should have either a single value or 3 (number of input channels)"
            )
        self.p = _validate.real("RandomErasing: p", p, 0.0, 1.0)
        self.scale, self.ratio, self.value, self.inplace = scale, ratio, value, inplace

    def _to_native(self):
        random = self.value == "random"
        values = [0.0] if random else [self.value] if isinstance(self.value, numbers.Number) else list(self.value)
        values = [_validate.real("RandomErasing: value", v) for v in values]
        return _native.RandomErasing(
            p=self.p,
            scale=self.scale,
            ratio=self.ratio,
            random=random,
            value=values * 3 if len(values) == 1 else values,
        )

    def __repr__(self) -> str:
        return (
            f"RandomErasing(p={self.p}, scale={self.scale}, ratio={self.ratio}, value={self.value}, "
            f"inplace={self.inplace})"
        )
