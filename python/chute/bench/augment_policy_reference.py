"""torchvision's augmentation policies and random transforms, transcribed with torch's RNG: the draws
(``draw``: which ops at which magnitudes, the sign, the probabilities, the Dirichlet weights; the random
transforms' get_params) and the forward on a PIL image (``__call__``, with chute.bench.augment_reference's
ops). The distribution tests compare chute's draws with these (python/tests/test_augment_draws.py); the
real-torchvision tier compares these with torchvision's own forward. Transcribed from torchvision 0.29
``transforms/autoaugment.py`` and ``transforms.py``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image

from chute.bench import augment_reference as F

# AutoAugment._get_policies: (op, probability, magnitude bin or None) pairs.
AUTO_AUGMENT_POLICIES = {
    "imagenet": [
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ],
    "cifar10": [
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ],
    "svhn": [
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ],
}  # fmt: skip


def augmentation_space(policy: str, num_bins: int, height: int, width: int, all_ops: bool = True) -> dict:
    """The policy's _augmentation_space: op -> (magnitudes tensor, signed), in torchvision's order."""
    lin = torch.linspace
    scalar = torch.tensor(0.0)
    if policy == "TrivialAugmentWide":
        return {
            "Identity": (scalar, False), "ShearX": (lin(0.0, 0.99, num_bins), True),
            "ShearY": (lin(0.0, 0.99, num_bins), True), "TranslateX": (lin(0.0, 32.0, num_bins), True),
            "TranslateY": (lin(0.0, 32.0, num_bins), True), "Rotate": (lin(0.0, 135.0, num_bins), True),
            "Brightness": (lin(0.0, 0.99, num_bins), True), "Color": (lin(0.0, 0.99, num_bins), True),
            "Contrast": (lin(0.0, 0.99, num_bins), True), "Sharpness": (lin(0.0, 0.99, num_bins), True),
            "Posterize": (8 - (torch.arange(num_bins) / ((num_bins - 1) / 6)).round().int(), False),
            "Solarize": (lin(255.0, 0.0, num_bins), False), "AutoContrast": (scalar, False),
            "Equalize": (scalar, False),
        }  # fmt: skip
    if policy == "AugMix":
        space = {
            "ShearX": (lin(0.0, 0.3, num_bins), True), "ShearY": (lin(0.0, 0.3, num_bins), True),
            "TranslateX": (lin(0.0, width / 3.0, num_bins), True), "TranslateY": (lin(0.0, height / 3.0, num_bins), True),
            "Rotate": (lin(0.0, 30.0, num_bins), True),
            "Posterize": (4 - (torch.arange(num_bins) / ((num_bins - 1) / 4)).round().int(), False),
            "Solarize": (lin(255.0, 0.0, num_bins), False), "AutoContrast": (scalar, False), "Equalize": (scalar, False),
        }  # fmt: skip
        if all_ops:
            for op in ("Brightness", "Color", "Contrast", "Sharpness"):
                space[op] = (lin(0.0, 0.9, num_bins), True)
        return space
    space = {
        "Identity": (scalar, False), "ShearX": (lin(0.0, 0.3, num_bins), True), "ShearY": (lin(0.0, 0.3, num_bins), True),
        "TranslateX": (lin(0.0, 150.0 / 331.0 * width, num_bins), True),
        "TranslateY": (lin(0.0, 150.0 / 331.0 * height, num_bins), True), "Rotate": (lin(0.0, 30.0, num_bins), True),
        "Brightness": (lin(0.0, 0.9, num_bins), True), "Color": (lin(0.0, 0.9, num_bins), True),
        "Contrast": (lin(0.0, 0.9, num_bins), True), "Sharpness": (lin(0.0, 0.9, num_bins), True),
        "Posterize": (8 - (torch.arange(num_bins) / ((num_bins - 1) / 4)).round().int(), False),
        "Solarize": (lin(255.0, 0.0, num_bins), False), "AutoContrast": (scalar, False), "Equalize": (scalar, False),
    }  # fmt: skip
    if policy == "AutoAugment":
        del space["Identity"]
        space["Invert"] = (scalar, False)
    return space


class _Policy:
    interpolation, fill = "nearest", None

    def __call__(self, img: Image.Image) -> Image.Image:
        for op, magnitude in self.draw(img.height, img.width):
            img = F.apply_op(img, op, magnitude, self.interpolation, self.fill)
        return img


class AutoAugment(_Policy):
    def __init__(self, policy: str = "imagenet"):
        self.policies = AUTO_AUGMENT_POLICIES[policy]

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        policy_id = int(torch.randint(len(self.policies), (1,)).item())
        probs, signs = torch.rand((2,)), torch.randint(2, (2,))
        ops = []
        for i, (op, p, bin_) in enumerate(self.policies[policy_id]):
            if probs[i] <= p:
                magnitudes, signed = augmentation_space("AutoAugment", 10, height, width)[op]
                magnitude = float(magnitudes[bin_].item()) if bin_ is not None else 0.0
                if signed and signs[i] == 0:
                    magnitude *= -1.0
                ops.append((op, magnitude))
        return ops


class RandAugment(_Policy):
    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31):
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        space = augmentation_space("RandAugment", self.num_magnitude_bins, height, width)
        ops = []
        for _ in range(self.num_ops):
            op = list(space.keys())[int(torch.randint(len(space), (1,)).item())]
            magnitudes, signed = space[op]
            magnitude = float(magnitudes[self.magnitude].item()) if magnitudes.ndim > 0 else 0.0
            if signed and torch.randint(2, (1,)):
                magnitude *= -1.0
            ops.append((op, magnitude))
        return ops


class TrivialAugmentWide(_Policy):
    def __init__(self, num_magnitude_bins: int = 31):
        self.num_magnitude_bins = num_magnitude_bins

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        space = augmentation_space("TrivialAugmentWide", self.num_magnitude_bins, height, width)
        op = list(space.keys())[int(torch.randint(len(space), (1,)).item())]
        magnitudes, signed = space[op]
        magnitude = (
            float(magnitudes[torch.randint(len(magnitudes), (1,), dtype=torch.long)].item())
            if magnitudes.ndim > 0
            else 0.0
        )
        if signed and torch.randint(2, (1,)):
            magnitude *= -1.0
        return [(op, magnitude)]


class AugMix:
    def __init__(self, severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True, interpolation="bilinear"):
        self.severity, self.mixture_width, self.chain_depth = severity, mixture_width, chain_depth
        self.alpha, self.all_ops, self.interpolation, self.fill = alpha, all_ops, interpolation, None

    def draw(self, height: int, width: int) -> dict:
        """The weights (m ~ Dirichlet(alpha, alpha); chain weights Dirichlet(alpha...) * m[1]) and the chains."""
        space = augmentation_space("AugMix", 10, height, width, self.all_ops)
        m = torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]).expand(1, -1))
        weights = torch._sample_dirichlet(torch.tensor([self.alpha] * self.mixture_width).expand(1, -1)) * m[:, 1].view(
            [1, -1]
        )
        depths, ops = [], []
        for _ in range(self.mixture_width):
            depth = self.chain_depth if self.chain_depth > 0 else int(torch.randint(low=1, high=4, size=(1,)).item())
            depths.append(depth)
            for _ in range(depth):
                op = list(space.keys())[int(torch.randint(len(space), (1,)).item())]
                magnitudes, signed = space[op]
                magnitude = (
                    float(magnitudes[torch.randint(self.severity, (1,), dtype=torch.long)].item())
                    if magnitudes.ndim > 0
                    else 0.0
                )
                if signed and torch.randint(2, (1,)):
                    magnitude *= -1.0
                ops.append((op, magnitude))
        return {"original_weight": float(m[0, 0]), "chain_weights": weights[0].tolist(), "chain_depths": depths,
                "ops": ops}  # fmt: skip

    def mix(self, img: Image.Image, draw: dict) -> Image.Image:
        """AugMix.forward's mixing on the tensor of a PIL image, for given draws."""
        batch = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)
        mix = torch.tensor(draw["original_weight"], dtype=torch.float32) * batch
        ops = iter(draw["ops"])
        for depth, weight in zip(draw["chain_depths"], draw["chain_weights"]):
            aug = batch
            for _ in range(depth):
                op, magnitude = next(ops)
                aug = F.apply_op(aug, op, magnitude, self.interpolation, self.fill)
            mix.add_(torch.tensor(weight, dtype=torch.float32) * aug)
        return Image.fromarray(mix.to(torch.uint8).permute(1, 2, 0).numpy(), "RGB")

    def __call__(self, img: Image.Image) -> Image.Image:
        return self.mix(img, self.draw(img.height, img.width))


def color_jitter_params(brightness, contrast, saturation, hue):
    """ColorJitter.get_params: the order, then each factor (None where its range is None)."""
    fn_idx = torch.randperm(4)
    factors = [None if r is None else float(torch.empty(1).uniform_(r[0], r[1])) for r in (brightness, contrast,
               saturation, hue)]  # fmt: skip
    return fn_idx.tolist(), factors


def random_affine_params(degrees, translate, scale_ranges, shears, width: int, height: int):
    """RandomAffine.get_params (img_size = [width, height])."""
    angle = float(torch.empty(1).uniform_(float(degrees[0]), float(degrees[1])).item())
    if translate is not None:
        max_dx, max_dy = float(translate[0] * width), float(translate[1] * height)
        translations = (int(round(torch.empty(1).uniform_(-max_dx, max_dx).item())),
                        int(round(torch.empty(1).uniform_(-max_dy, max_dy).item())))  # fmt: skip
    else:
        translations = (0, 0)
    scale = 1.0 if scale_ranges is None else float(torch.empty(1).uniform_(scale_ranges[0], scale_ranges[1]).item())
    shear_x = shear_y = 0.0
    if shears is not None:
        shear_x = float(torch.empty(1).uniform_(shears[0], shears[1]).item())
        if len(shears) == 4:
            shear_y = float(torch.empty(1).uniform_(shears[2], shears[3]).item())
    return angle, translations, scale, (shear_x, shear_y)


def random_erasing_box(height: int, width: int, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3)):
    """RandomErasing.forward's coin and get_params: (top, left, h, w), or None (no erasing)."""
    if not torch.rand(1) < p:
        return None
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        erase_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        h = int(round(math.sqrt(erase_area * aspect_ratio)))
        w = int(round(math.sqrt(erase_area / aspect_ratio)))
        if not (h < height and w < width):
            continue
        i = torch.randint(0, height - h + 1, size=(1,)).item()
        j = torch.randint(0, width - w + 1, size=(1,)).item()
        return i, j, h, w
    return None
