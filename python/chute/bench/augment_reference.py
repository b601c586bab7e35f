"""torchvision's functional augmentation ops, transcribed: the reference chute's pixel stage is tested
against where torchvision does not import (the main test tier), and the ops of the augmentation peer
(chute.bench.augment_policy_reference) of the benchmarks.

Each function takes a PIL image (torchvision's ``functional_pil``: Pillow's ``Image.transform``,
``Image.rotate``, ``ImageEnhance``, ``ImageOps``, called as torchvision calls them) or a uint8 CHW tensor
(torchvision's ``functional_tensor``: float32 blends, ``grid_sample``, ``conv2d``, with torch's own
kernels), like torchvision's ``functional`` dispatch. Transcribed from torchvision 0.29
(``transforms/functional.py``, ``_functional_pil.py``, ``_functional_tensor.py``, ``autoaugment.py``'s
``_apply_op``); the real-torchvision tier (python/tests/test_torchvision_augment_real.py) checks the
transcription and chute against torchvision itself.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as tnf
from PIL import Image, ImageEnhance, ImageOps

_PIL_FILTERS = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR}


def inverse_affine_matrix(center, angle, translate, scale, shear) -> list[float]:
    """torchvision's _get_inverse_affine_matrix (inverted=True)."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [x / scale for x in [d, -b, 0.0, -c, a, 0.0]]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def _pil_fill(fill, img):
    """functional_pil._parse_fill for an RGB image."""
    if fill is None:
        fill = 0
    if isinstance(fill, (int, float)):
        fill = (fill,) * 3
    if len(fill) == 1:
        fill = tuple(fill) * 3
    return {"fillcolor": tuple(int(x) for x in fill)}


def _tensor_fill(fill):
    if fill is None:
        return None
    return [float(fill)] * 3 if isinstance(fill, (int, float)) else [float(f) for f in fill]


def _apply_grid(img: torch.Tensor, matrix, interpolation: str, fill) -> torch.Tensor:
    """functional_tensor.affine with expand=False: _gen_affine_grid, then _apply_grid_transform."""
    h, w = img.shape[-2:]
    theta = torch.tensor(matrix, dtype=torch.float32).reshape(1, 2, 3)
    base = torch.empty(1, h, w, 3, dtype=torch.float32)
    base[..., 0].copy_(torch.linspace(-w * 0.5 + 0.5, w * 0.5 + 0.5 - 1, steps=w))
    base[..., 1].copy_(torch.linspace(-h * 0.5 + 0.5, h * 0.5 + 0.5 - 1, steps=h).unsqueeze_(-1))
    base[..., 2].fill_(1)
    rescaled = theta.transpose(1, 2) / torch.tensor([0.5 * w, 0.5 * h], dtype=torch.float32)
    grid = base.view(1, h * w, 3).bmm(rescaled).view(1, h, w, 2)
    x = img.unsqueeze(0).to(torch.float32)
    if fill is not None:
        x = torch.cat((x, torch.ones((1, 1, h, w), dtype=x.dtype)), dim=1)
    x = tnf.grid_sample(x, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None:
        mask = x[:, -1:, :, :].expand_as(x[:, :-1])
        x = x[:, :-1]
        fill_img = torch.tensor(fill, dtype=x.dtype).view(1, len(fill), 1, 1).expand_as(x)
        if interpolation == "nearest":
            mask = mask < 0.5
            x[mask] = fill_img[mask]
        else:
            x = x * mask + (1.0 - mask) * fill_img
    return torch.round(x.squeeze(0)).to(torch.uint8)


def affine(img, angle, translate, scale, shear, interpolation="nearest", fill=None, center=None):
    """F.affine: the PIL path about (w/2, h/2) by default; the tensor path about the centre offset."""
    if isinstance(img, Image.Image):
        w, h = img.size
        center = [w * 0.5, h * 0.5] if center is None else center
        matrix = inverse_affine_matrix(center, angle, translate, scale, shear)
        return img.transform(img.size, Image.AFFINE, matrix, _PIL_FILTERS[interpolation], **_pil_fill(fill, img))
    h, w = img.shape[-2:]
    center_f = [0.0, 0.0] if center is None else [1.0 * (c - s * 0.5) for c, s in zip(center, [w, h])]
    matrix = inverse_affine_matrix(center_f, angle, [1.0 * t for t in translate], scale, shear)
    return _apply_grid(img, matrix, interpolation, _tensor_fill(fill))


def rotate(img, angle, interpolation="nearest", center=None, fill=None):
    """F.rotate with expand=False: Image.rotate, or the tensor grid with the angle negated."""
    if isinstance(img, Image.Image):
        return img.rotate(angle, _PIL_FILTERS[interpolation], False, center, **_pil_fill(fill, img))
    h, w = img.shape[-2:]
    center_f = [0.0, 0.0] if center is None else [1.0 * (c - s * 0.5) for c, s in zip(center, [w, h])]
    matrix = inverse_affine_matrix(center_f, -angle, [0.0, 0.0], 1.0, [0.0, 0.0])
    return _apply_grid(img, matrix, interpolation, _tensor_fill(fill))


def _blend(img1: torch.Tensor, img2: torch.Tensor, ratio: float) -> torch.Tensor:
    ratio = float(ratio)
    return (ratio * img1 + (1.0 - ratio) * img2).clamp(0, 255).to(img1.dtype)


def rgb_to_grayscale(img):
    """F.rgb_to_grayscale(img, num_output_channels=3)."""
    if isinstance(img, Image.Image):
        return img.convert("L").convert("RGB")
    r, g, b = img.unbind(dim=-3)
    return (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype).unsqueeze(dim=-3).expand(img.shape)


def adjust_brightness(img, factor):
    if isinstance(img, Image.Image):
        return ImageEnhance.Brightness(img).enhance(factor)
    return _blend(img, torch.zeros_like(img), factor)


def adjust_contrast(img, factor):
    if isinstance(img, Image.Image):
        return ImageEnhance.Contrast(img).enhance(factor)
    mean = torch.mean(rgb_to_grayscale(img)[:1].to(torch.float32), dim=(-3, -2, -1), keepdim=True)
    return _blend(img, mean, factor)


def adjust_saturation(img, factor):
    if isinstance(img, Image.Image):
        return ImageEnhance.Color(img).enhance(factor)
    return _blend(img, rgb_to_grayscale(img), factor)


def adjust_sharpness(img, factor):
    if isinstance(img, Image.Image):
        return ImageEnhance.Sharpness(img).enhance(factor)
    if img.size(-1) <= 2 or img.size(-2) <= 2:
        return img
    kernel = torch.ones((3, 3), dtype=torch.float32)
    kernel[1, 1] = 5.0
    kernel /= kernel.sum()
    kernel = kernel.expand(img.shape[-3], 1, 3, 3)
    blurred = tnf.conv2d(img.unsqueeze(0).to(torch.float32), kernel, groups=img.shape[-3])
    degenerate = img.clone()
    degenerate[..., 1:-1, 1:-1] = torch.round(blurred.squeeze(0)).to(torch.uint8)
    return _blend(img, degenerate, factor)


def adjust_hue(img, factor):
    """functional_pil.adjust_hue (the PIL path only)."""
    h, s, v = img.convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    np_h += np.int32(factor * 255).astype(np.uint8)
    return Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB")


def posterize(img, bits):
    if isinstance(img, Image.Image):
        return ImageOps.posterize(img, bits)
    return img & -int(2 ** (8 - bits))


def solarize(img, threshold):
    if isinstance(img, Image.Image):
        return ImageOps.solarize(img, threshold)
    return torch.where(img >= threshold, 255 - img, img)


def autocontrast(img):
    if isinstance(img, Image.Image):
        return ImageOps.autocontrast(img)
    minimum = img.amin(dim=(-2, -1), keepdim=True).to(torch.float32)
    maximum = img.amax(dim=(-2, -1), keepdim=True).to(torch.float32)
    scale = 255 / (maximum - minimum)
    eq = torch.isfinite(scale).logical_not()
    minimum[eq] = 0
    scale[eq] = 1
    return ((img - minimum) * scale).clamp(0, 255).to(img.dtype)


def equalize(img):
    if isinstance(img, Image.Image):
        return ImageOps.equalize(img)
    out = []
    for chan in img:
        hist = torch.bincount(chan.reshape(-1), minlength=256)
        nonzero = hist[hist != 0]
        step = torch.div(nonzero[:-1].sum(), 255, rounding_mode="floor")
        if step == 0:
            out.append(chan)
            continue
        lut = torch.div(torch.cumsum(hist, 0) + torch.div(step, 2, rounding_mode="floor"), step, rounding_mode="floor")
        lut = tnf.pad(lut, [1, 0])[:-1].clamp(0, 255)
        out.append(lut[chan.to(torch.int64)].to(torch.uint8))
    return torch.stack(out)


def invert(img):
    if isinstance(img, Image.Image):
        return ImageOps.invert(img)
    return 255 - img


def gaussian_blur(img, kernel_size, sigma):
    """F.gaussian_blur: a PIL image is blurred as a tensor (functional_tensor.gaussian_blur) and returned
    as PIL."""
    pil = isinstance(img, Image.Image)
    t = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1) if pil else img

    def kernel1d(k, s):
        half = (k - 1) * 0.5
        pdf = torch.exp(-0.5 * (torch.linspace(-half, half, steps=k) / s).pow(2))
        return pdf / pdf.sum()

    kx, ky = kernel1d(kernel_size[0], sigma[0]), kernel1d(kernel_size[1], sigma[1])
    kernel = torch.mm(ky[:, None], kx[None, :]).expand(3, 1, kernel_size[1], kernel_size[0])
    x = t.unsqueeze(0).to(torch.float32)
    pad = [kernel_size[0] // 2, kernel_size[0] // 2, kernel_size[1] // 2, kernel_size[1] // 2]
    x = tnf.conv2d(tnf.pad(x, pad, mode="reflect"), kernel, groups=3)
    out = torch.round(x.squeeze(0)).to(torch.uint8)
    return Image.fromarray(out.permute(1, 2, 0).numpy(), "RGB") if pil else out


def apply_op(img, op_name: str, magnitude: float, interpolation="nearest", fill=None):
    """torchvision's autoaugment._apply_op."""
    if op_name == "ShearX":
        return affine(img, 0.0, [0, 0], 1.0, [math.degrees(math.atan(magnitude)), 0.0], interpolation, fill, [0, 0])
    if op_name == "ShearY":
        return affine(img, 0.0, [0, 0], 1.0, [0.0, math.degrees(math.atan(magnitude))], interpolation, fill, [0, 0])
    if op_name == "TranslateX":
        return affine(img, 0.0, [int(magnitude), 0], 1.0, [0.0, 0.0], interpolation, fill)
    if op_name == "TranslateY":
        return affine(img, 0.0, [0, int(magnitude)], 1.0, [0.0, 0.0], interpolation, fill)
    if op_name == "Rotate":
        return rotate(img, magnitude, interpolation, fill=fill)
    if op_name == "Brightness":
        return adjust_brightness(img, 1.0 + magnitude)
    if op_name == "Color":
        return adjust_saturation(img, 1.0 + magnitude)
    if op_name == "Contrast":
        return adjust_contrast(img, 1.0 + magnitude)
    if op_name == "Sharpness":
        return adjust_sharpness(img, 1.0 + magnitude)
    if op_name == "Posterize":
        return posterize(img, int(magnitude))
    if op_name == "Solarize":
        return solarize(img, magnitude)
    if op_name == "AutoContrast":
        return autocontrast(img)
    if op_name == "Equalize":
        return equalize(img)
    if op_name == "Invert":
        return invert(img)
    if op_name == "Identity":
        return img
    raise ValueError(f"The provided operator {op_name} is not recognized.")


def pixel_op(img, op: str, **params):
    """One of chute._native.sample_draws' op dicts applied with these functions (the test's replay)."""
    fill = params.get("fill")
    if op == "affine":
        return affine(
            img, params["angle"], list(params["translate"]), params["scale"], list(params["shear"]),
            params["interpolation"], fill, params.get("center"),
        )  # fmt: skip
    if op == "rotate":
        return rotate(img, params["angle"], params["interpolation"], params.get("center"), fill)
    if op in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_sharpness", "adjust_hue"):
        return globals()[op](img, params["factor"])
    if op == "posterize":
        return posterize(img, params["bits"])
    if op == "solarize":
        return solarize(img, params["threshold"])
    if op == "gaussian_blur":
        return gaussian_blur(img, list(params["kernel_size"]), list(params["sigma"]))
    if op == "hflip":
        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if isinstance(img, Image.Image) else img.flip(-1)
    return {"autocontrast": autocontrast, "equalize": equalize, "invert": invert, "rgb_to_grayscale": rgb_to_grayscale,
            "identity": lambda x: x}[op](img)  # fmt: skip
