"""Stand-ins for torchvision's ImageFolder and v1 transforms, for tests and benchmarks, and the real ones
where torchvision imports (``real_torchvision()``).

torchvision 0.29.1 does not import with torch 2.13 (the version the main venv tests with), so these classes
reproduce what chute's fast path recognises: the same class names, ``__module__`` and attributes as
torchvision's, and the same semantics, implemented with PIL and torch the way torchvision implements them
on PIL images (``torchvision/transforms/transforms.py``, ``functional.py``, ``functional_pil.py``,
``datasets/folder.py``). They are real references: the fast path's output is compared with theirs.
scripts/test_torchvision.sh runs the same tests against the real torchvision (torch 2.14.1, .venv-tv).
"""

from __future__ import annotations

import enum
import numbers
import os
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from chute.bench import torch_peer

_TRANSFORMS = "torchvision.transforms.transforms"
_FOLDER = "torchvision.datasets.folder"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def _setup_size(size) -> tuple[int, int]:
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1:
        return size[0], size[0]
    return size[0], size[1]


def _pil_filter(mode: InterpolationMode):
    return {InterpolationMode.NEAREST: Image.NEAREST, InterpolationMode.BILINEAR: Image.BILINEAR,
            InterpolationMode.BICUBIC: Image.BICUBIC}[mode]


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class RandomResizedCrop(torch.nn.Module):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):
        super().__init__()
        self.size = _setup_size(size)
        self.scale, self.ratio, self.interpolation, self.antialias = scale, ratio, interpolation, antialias

    # torchvision's sampling algorithm, fallback included: the bench peer's copy (one implementation of it).
    get_params = staticmethod(torch_peer.RandomResizedCrop.get_params)

    def forward(self, img):
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        return img.crop((j, i, j + w, i + h)).resize((self.size[1], self.size[0]), _pil_filter(self.interpolation))


class Resize(torch.nn.Module):
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
        super().__init__()
        self.size, self.interpolation, self.max_size, self.antialias = size, interpolation, max_size, antialias

    def forward(self, img):
        w, h = img.size
        size = self.size
        if isinstance(size, int) or len(size) == 1:
            requested = size if isinstance(size, int) else size[0]
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = requested, int(requested * long / short)
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_h, new_w = size
        if (new_w, new_h) == (w, h):
            return img
        return img.resize((new_w, new_h), _pil_filter(self.interpolation))


class CenterCrop(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.size = _setup_size(size)

    def forward(self, img):
        w, h = img.size
        ch, cw = self.size
        if cw > w or ch > h:
            raise NotImplementedError("stand-in: padding CenterCrop is not reproduced")
        top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
        return img.crop((left, top, left + cw, top + ch))


class RandomHorizontalFlip(torch.nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, img):
        if torch.rand(1) < self.p:
            return img.transpose(Image.FLIP_LEFT_RIGHT) if isinstance(img, Image.Image) else img.flip(-1)
        return img


class ToTensor:
    def __call__(self, pic):
        img = torch.from_numpy(np.array(pic, np.uint8, copy=True))
        img = img.view(pic.size[1], pic.size[0], len(pic.getbands())).permute((2, 0, 1)).contiguous()
        return img.to(dtype=torch.get_default_dtype()).div(255)


class PILToTensor:
    def __call__(self, pic):
        img = torch.as_tensor(np.array(pic, copy=True))
        return img.view(pic.size[1], pic.size[0], len(pic.getbands())).permute((2, 0, 1))


class ConvertImageDtype(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, image):
        if image.dtype == self.dtype:
            return image
        if image.is_floating_point():
            if self.dtype.is_floating_point:
                return image.to(self.dtype)
            eps = 1e-3
            return image.mul(torch.iinfo(self.dtype).max + 1.0 - eps).to(self.dtype)
        if self.dtype.is_floating_point:
            return image.to(self.dtype).div_(torch.iinfo(image.dtype).max)
        raise NotImplementedError("stand-in: int-to-int conversion is not reproduced")


class Normalize(torch.nn.Module):
    def __init__(self, mean, std, inplace=False):
        super().__init__()
        self.mean, self.std, self.inplace = mean, std, inplace

    def forward(self, tensor):
        if not tensor.is_floating_point():
            raise TypeError(f"Input tensor should be a float tensor. Got {tensor.dtype}.")
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return (tensor if self.inplace else tensor.clone()).sub_(mean).div_(std)


class ColorJitter(torch.nn.Module):
    """Only its name matters here: a torchvision transform chute does not run natively."""

    def __init__(self, brightness=0.0):
        super().__init__()
        self.brightness = brightness

    def forward(self, img):
        return img


IMG_EXTENSIONS = torch_peer.IMG_EXTENSIONS


def pil_loader(path: str) -> Image.Image:
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def default_loader(path: str):
    return pil_loader(path)


class DatasetFolder:
    def __init__(self, root, loader, extensions=None, transform=None, target_transform=None, is_valid_file=None):
        self.root = os.fspath(root)
        self.transform, self.target_transform = transform, target_transform
        classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        class_to_idx = {c: i for i, c in enumerate(classes)}
        samples = []
        for c in sorted(class_to_idx):
            for dirpath, _, fnames in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                for fname in sorted(fnames):
                    path = os.path.join(dirpath, fname)
                    ok = is_valid_file(path) if is_valid_file else path.lower().endswith(tuple(extensions))
                    if ok:
                        samples.append((path, class_to_idx[c]))
        self.loader, self.extensions = loader, extensions
        self.classes, self.class_to_idx = classes, class_to_idx
        self.samples = samples
        self.targets = [s[1] for s in samples]

    def __getitem__(self, index):
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __len__(self):
        return len(self.samples)


class ImageFolder(DatasetFolder):
    def __init__(self, root, transform=None, target_transform=None, loader=default_loader, is_valid_file=None):
        super().__init__(root, loader, IMG_EXTENSIONS if is_valid_file is None else None, transform=transform,
                         target_transform=target_transform, is_valid_file=is_valid_file)
        self.imgs = self.samples


for _cls in (InterpolationMode, Compose, RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor,
             PILToTensor, ConvertImageDtype, Normalize, ColorJitter):
    _cls.__module__ = _TRANSFORMS
InterpolationMode.__module__ = "torchvision.transforms.functional"
for _obj in (DatasetFolder, ImageFolder, pil_loader, default_loader):
    _obj.__module__ = _FOLDER


def real_torchvision():
    """torchvision's own v1 transforms, ImageFolder and loaders under the names these stand-ins have, or None
    where torchvision does not import (its build must match torch's)."""
    try:
        import types

        from torchvision import datasets, transforms
        from torchvision.datasets import folder
    except (ImportError, OSError, RuntimeError):
        return None
    names = {n: getattr(transforms, n) for n in dir(transforms) if not n.startswith("_")}
    return types.SimpleNamespace(**names, ImageFolder=datasets.ImageFolder, DatasetFolder=datasets.DatasetFolder,
                                 pil_loader=folder.pil_loader, default_loader=folder.default_loader,
                                 IMG_EXTENSIONS=folder.IMG_EXTENSIONS, __name__="torchvision")
