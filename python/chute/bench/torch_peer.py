"""The PyTorch DataLoader peer that chute is benchmarked against.

torchvision is used when it imports; otherwise exact PIL re-implementations of its
``ImageFolder`` and the standard train and eval transforms stand in for it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

try:
    import torchvision
    from torchvision import datasets as tv_datasets, transforms as tv_transforms
except (ImportError, OSError, RuntimeError):
    torchvision = None

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def uses_torchvision() -> bool:
    """Return True when the peer runs on real torchvision."""
    return torchvision is not None


class Compose:
    """Apply transforms in order, like ``torchvision.transforms.Compose``."""

    def __init__(self, transforms: list[Callable]):
        self.transforms = transforms

    def __call__(self, img):
        for transform in self.transforms:
            img = transform(img)
        return img


class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop`` with bilinear interpolation, on PIL images."""

    def __init__(self, size: int, scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)):
        self.size = size
        self.scale = scale
        self.ratio = ratio

    @staticmethod
    def get_params(img: Image.Image, scale: tuple[float, float],
                   ratio: tuple[float, float]) -> tuple[int, int, int, int]:
        """Return the crop window ``(top, left, height, width)``, drawing from torch's RNG."""
        width, height = img.size
        area = height * width
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        # Fallback: a centre crop clamped to the ratio range.
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w = width
            h = int(round(w / min(ratio)))
        elif in_ratio > max(ratio):
            h = height
            w = int(round(h * max(ratio)))
        else:
            w = width
            h = height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img: Image.Image) -> Image.Image:
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        crop = img.crop((j, i, j + w, i + h))
        return crop.resize((self.size, self.size), Image.Resampling.BILINEAR)


class RandomHorizontalFlip:
    """Mirror a PIL image with probability ``p``, drawing from torch's RNG."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, img: Image.Image) -> Image.Image:
        if torch.rand(1) < self.p:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img


class Resize:
    """Scale the shorter side to ``size`` (the longer to ``int(size * long / short)``)."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        width, height = img.size
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.size, int(self.size * long / short)
        new_size = (new_short, new_long) if width <= height else (new_long, new_short)
        if new_size == img.size:
            return img
        return img.resize(new_size, Image.Resampling.BILINEAR)


class CenterCrop:
    """Crop the centre ``size x size`` window, zero-padding images smaller than it."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        width, height = img.size
        if self.size > width or self.size > height:
            padded = Image.new(img.mode, (max(width, self.size), max(height, self.size)))
            padded.paste(img, (max(self.size - width, 0) // 2, max(self.size - height, 0) // 2))
            img = padded
            width, height = img.size
        top = int(round((height - self.size) / 2.0))
        left = int(round((width - self.size) / 2.0))
        return img.crop((left, top, left + self.size, top + self.size))


class ToTensor:
    """Convert an RGB PIL image to a float32 CHW tensor in [0, 1]."""

    def __call__(self, img: Image.Image) -> torch.Tensor:
        array = np.array(img, np.uint8, copy=True)
        tensor = torch.from_numpy(array).view(img.size[1], img.size[0], len(img.getbands()))
        return tensor.permute((2, 0, 1)).contiguous().to(dtype=torch.float32).div(255)


class Normalize:
    """Subtract ``mean`` and divide by ``std`` per channel, out of place."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]):
        self.mean = mean
        self.std = std

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return tensor.clone().sub_(mean).div_(std)


def make_train_transform() -> Callable:
    """Return ``RandomResizedCrop(224)`` + flip + ``ToTensor`` + ``Normalize``."""
    if uses_torchvision():
        t = tv_transforms
        return t.Compose([t.RandomResizedCrop(224), t.RandomHorizontalFlip(), t.ToTensor(),
                          t.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
                    Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def make_eval_transform() -> Callable:
    """Return ``Resize(256)`` + ``CenterCrop(224)`` + ``ToTensor`` + ``Normalize``."""
    if uses_torchvision():
        t = tv_transforms
        return t.Compose([t.Resize(256), t.CenterCrop(224), t.ToTensor(),
                          t.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return Compose([Resize(256), CenterCrop(224), ToTensor(),
                    Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def pil_loader(path: str) -> Image.Image:
    """Open an image file as RGB, like torchvision's ``pil_loader``."""
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


class PilImageFolder(Dataset):
    """A minimal ``torchvision.datasets.ImageFolder`` with the same listing rules."""

    def __init__(self, root: str | os.PathLike, transform: Callable | None = None):
        self.root = os.fspath(root)
        self.transform = transform
        self.classes = sorted(entry.name for entry in os.scandir(self.root) if entry.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {self.root}.")
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        self.samples = []
        empty = []
        for name in self.classes:
            found = len(self.samples)
            for dirpath, _, filenames in sorted(os.walk(os.path.join(self.root, name),
                                                        followlinks=True)):
                for filename in sorted(filenames):
                    if filename.lower().endswith(IMG_EXTENSIONS):
                        self.samples.append((os.path.join(dirpath, filename),
                                             self.class_to_idx[name]))
            if len(self.samples) == found:
                empty.append(name)
        if empty:
            raise FileNotFoundError(f"Found no valid file for the classes {', '.join(empty)}.")
        self.targets = [target for _, target in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        img = pil_loader(path)
        if self.transform is not None:
            img = self.transform(img)
        return img, target


def make_peer_dataset(root: str | os.PathLike, train: bool = True) -> Dataset:
    """Return an ImageFolder over ``root`` with the train or eval transform."""
    transform = make_train_transform() if train else make_eval_transform()
    if uses_torchvision():
        return tv_datasets.ImageFolder(os.fspath(root), transform=transform)
    return PilImageFolder(root, transform=transform)


def make_dataloader(root: str | os.PathLike, *, batch_size: int = 256, num_workers: int = 0,
                    prefetch_factor: int = 2, pin_memory: bool = False, persistent_workers: bool = True,
                    train: bool = True) -> DataLoader:
    """A shuffling DataLoader over ``root``, configured the way users tune it."""
    multiprocess = num_workers > 0
    return DataLoader(make_peer_dataset(Path(root), train=train), batch_size=batch_size, shuffle=True,
                      num_workers=num_workers, pin_memory=pin_memory,
                      prefetch_factor=prefetch_factor if multiprocess else None,
                      persistent_workers=persistent_workers and multiprocess)
