"""The one PIL reference for torchvision, used by chute's tests (pixel parity, the DataLoader fast path, the
doctor) and by its benchmarks (the DataLoader peer where torchvision does not import).

torchvision's ``ImageFolder`` and the v1 transforms chute translates, with the same names, arguments,
attributes and semantics, implemented with PIL and torch the way torchvision implements them on PIL images
(``torchvision/transforms/transforms.py``, ``functional.py``, ``functional_pil.py``,
``datasets/folder.py``): the same random draws from torch's RNG, the same rounding, the same listing rules.
They run on PIL images with uint8 RGB (``"RGB"``, ``"L"``) pixels; what they do not reproduce raises
``NotImplementedError`` (an int-to-int ``ConvertImageDtype``, ``ColorJitter`` beyond brightness).

* :func:`real_torchvision` gives torchvision's own classes under these names, where torchvision imports
  (its build must match torch's).
* :func:`as_torchvision` gives these classes as chute's fast path and doctor recognise torchvision's: each a
  subclass whose ``__module__`` is torchvision's (``torchvision.transforms.transforms``,
  ``torchvision.datasets.folder``). The classes here keep their own module, so that a dataset built from
  them pickles (spawned DataLoader workers) and the DataLoader's fast path never takes them for torchvision;
  the doctor does (``REPRODUCES_TORCHVISION``), to compare the bench's peer with chute.
"""

from __future__ import annotations

import enum
import functools
import math
import numbers
import os
import types
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageEnhance

# This module reproduces torchvision's ImageFolder and v1 transforms under their names: chute's doctor takes
# its classes as torchvision's when it builds the chute loader it compares a DataLoader with
# (chute/doctor/compare.py, which reads this attribute and never imports the bench).
REPRODUCES_TORCHVISION = True

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


_PIL_FILTERS = {
    InterpolationMode.NEAREST: Image.Resampling.NEAREST,
    InterpolationMode.BILINEAR: Image.Resampling.BILINEAR,
    InterpolationMode.BICUBIC: Image.Resampling.BICUBIC,
}


def _setup_size(size) -> tuple[int, int]:
    """``(height, width)`` from an int or a one- or two-item sequence."""
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1:
        return size[0], size[0]
    if len(size) != 2:
        raise ValueError("Please provide only two dimensions (h, w) for size.")
    return size[0], size[1]


def resized_crop(
    img: Image.Image,
    top: int,
    left: int,
    height: int,
    width: int,
    size: tuple[int, int],
    interpolation: InterpolationMode = InterpolationMode.BILINEAR,
) -> Image.Image:
    """torchvision's ``F.resized_crop`` on a PIL image: crop the window, resize it to ``size`` (h, w)."""
    crop = img.crop((left, top, left + width, top + height))
    return crop.resize((size[1], size[0]), _PIL_FILTERS[interpolation])


def resized_output_size(width: int, height: int, size, max_size: int | None = None) -> tuple[int, int]:
    """torchvision's ``_compute_resized_output_size`` as ``(width, height)``: an int (or one-item) size sets
    the shorter side, the longer becomes ``int(size * long / short)``, then at most ``max_size``."""
    if isinstance(size, int) or len(size) == 1:
        requested = size if isinstance(size, int) else size[0]
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = requested, int(requested * long / short)
        if max_size is not None:
            if max_size <= requested:
                raise ValueError(
                    f"max_size = {max_size} must be strictly greater than the requested size for "
                    f"the smaller edge size = {size}"
                )
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
        return (new_short, new_long) if width <= height else (new_long, new_short)
    return size[1], size[0]


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class RandomResizedCrop(torch.nn.Module):
    def __init__(
        self,
        size,
        scale=(0.08, 1.0),
        ratio=(3.0 / 4.0, 4.0 / 3.0),
        interpolation=InterpolationMode.BILINEAR,
        antialias=True,
    ):
        super().__init__()
        self.size = _setup_size(size)
        self.scale, self.ratio, self.interpolation, self.antialias = scale, ratio, interpolation, antialias

    @staticmethod
    def get_params(img: Image.Image, scale, ratio) -> tuple[int, int, int, int]:
        """The crop window ``(top, left, height, width)``: 10 tries drawing area and log-ratio from torch's
        RNG, then a centre crop clamped to the ratio range."""
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
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w = width
            h = int(round(w / min(ratio)))
        elif in_ratio > max(ratio):
            h = height
            w = int(round(h * max(ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def forward(self, img):
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        return resized_crop(img, i, j, h, w, self.size, self.interpolation)


class Resize(torch.nn.Module):
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
        super().__init__()
        if isinstance(size, Sequence) and len(size) not in (1, 2):
            raise ValueError("If size is a sequence, it should have 1 or 2 values")
        if max_size is not None and not (isinstance(size, int) or len(size) == 1):
            raise ValueError("max_size should only be passed if size specifies the length of the smaller edge")
        self.size, self.interpolation, self.max_size, self.antialias = size, interpolation, max_size, antialias

    def forward(self, img):
        new_size = resized_output_size(img.width, img.height, self.size, self.max_size)
        if new_size == img.size:
            return img
        return img.resize(new_size, _PIL_FILTERS[self.interpolation])


class CenterCrop(torch.nn.Module):
    """The centre ``size`` window at ``top = int(round((H - h) / 2))``; an image smaller than the window is
    first padded with zeros, ``(crop - image) // 2`` on the left (top), the rest on the right (bottom)."""

    def __init__(self, size):
        super().__init__()
        self.size = _setup_size(size)

    def forward(self, img):
        ch, cw = self.size
        w, h = img.size
        if cw > w or ch > h:
            padded = Image.new(img.mode, (max(w, cw), max(h, ch)))
            padded.paste(img, ((cw - w) // 2 if cw > w else 0, (ch - h) // 2 if ch > h else 0))
            img = padded
            w, h = img.size
            if (w, h) == (cw, ch):
                return img
        top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
        return img.crop((left, top, left + cw, top + ch))


class RandomHorizontalFlip(torch.nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, img):
        if torch.rand(1) < self.p:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if isinstance(img, Image.Image) else img.flip(-1)
        return img


class ToTensor:
    """A uint8 PIL image to a CHW tensor of torch's default float dtype, in [0, 1]."""

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
        raise NotImplementedError("pil_reference: an int-to-int ConvertImageDtype is not reproduced")


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
    """Brightness only (a transform chute does not run natively): a factor drawn from
    U(max(0, 1 - b), 1 + b) after torchvision's ``randperm(4)`` of the four adjustments, applied by PIL."""

    def __init__(self, brightness=0.0, contrast=0, saturation=0, hue=0):
        super().__init__()
        if contrast or saturation or hue:
            raise NotImplementedError("pil_reference: ColorJitter reproduces brightness only")
        self.brightness = (max(0.0, 1.0 - brightness), 1.0 + brightness) if brightness else None
        self.contrast = self.saturation = self.hue = None

    def forward(self, img):
        torch.randperm(4)  # the order of the adjustments: one of them here
        if self.brightness is None:
            return img
        factor = float(torch.empty(1).uniform_(self.brightness[0], self.brightness[1]))
        return ImageEnhance.Brightness(img).enhance(factor)


def pil_loader(path: str) -> Image.Image:
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def default_loader(path: str):
    return pil_loader(path)


class DatasetFolder(torch.utils.data.Dataset):
    """Class folders under ``root`` (sorted), each walked in sorted order, following links; a folder with no
    valid file is an error unless ``allow_empty``."""

    def __init__(
        self,
        root,
        loader,
        extensions=None,
        transform=None,
        target_transform=None,
        is_valid_file=None,
        allow_empty=False,
    ):
        self.root = os.fspath(root)
        self.transform, self.target_transform = transform, target_transform
        classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {self.root}.")
        class_to_idx = {c: i for i, c in enumerate(classes)}
        if (extensions is None) == (is_valid_file is None):
            raise ValueError("Both extensions and is_valid_file cannot be None or not None at the same time")
        if is_valid_file is None:
            suffixes = extensions if isinstance(extensions, str) else tuple(extensions)
            is_valid_file = lambda path: path.lower().endswith(suffixes)  # noqa: E731
        samples, found = [], set()
        for c in sorted(class_to_idx):
            for dirpath, _, fnames in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                for fname in sorted(fnames):
                    path = os.path.join(dirpath, fname)
                    if is_valid_file(path):
                        samples.append((path, class_to_idx[c]))
                        found.add(c)
        empty = set(classes) - found
        if empty and not allow_empty:
            raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}. ")
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
    def __init__(
        self, root, transform=None, target_transform=None, loader=default_loader, is_valid_file=None, allow_empty=False
    ):
        super().__init__(
            root,
            loader,
            IMG_EXTENSIONS if is_valid_file is None else None,
            transform=transform,
            target_transform=target_transform,
            is_valid_file=is_valid_file,
            allow_empty=allow_empty,
        )
        self.imgs = self.samples


_TRANSFORM_CLASSES = (
    Compose,
    RandomResizedCrop,
    Resize,
    CenterCrop,
    RandomHorizontalFlip,
    ToTensor,
    PILToTensor,
    ConvertImageDtype,
    Normalize,
    ColorJitter,
)
_TV_TRANSFORMS, _TV_FOLDER = "torchvision.transforms.transforms", "torchvision.datasets.folder"
_as_torchvision: types.SimpleNamespace | None = None


def as_torchvision() -> types.SimpleNamespace:
    """These classes and loaders as torchvision's: subclasses (and function copies) whose ``__module__`` is
    torchvision's, under torchvision's names, as chute's fast path and doctor recognise them. An instance
    pickles only where torchvision imports (the name leads there): use them in-process or with forked
    workers."""
    global _as_torchvision
    if _as_torchvision is not None:
        return _as_torchvision

    def function(f, module):
        g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
        g.__module__, g.__qualname__, g.__doc__ = module, f.__qualname__, f.__doc__
        return g

    def subclass(cls, module, bases=(), **members):
        return type(cls.__name__, (cls, *bases), {"__module__": module, "__qualname__": cls.__name__, **members})

    tv_pil_loader, tv_default_loader = function(pil_loader, _TV_FOLDER), function(default_loader, _TV_FOLDER)
    tv_dataset_folder = subclass(DatasetFolder, _TV_FOLDER)

    def image_folder_init(
        self,
        root,
        transform=None,
        target_transform=None,
        loader=tv_default_loader,
        is_valid_file=None,
        allow_empty=False,
    ):
        ImageFolder.__init__(self, root, transform, target_transform, loader, is_valid_file, allow_empty)

    names = {cls.__name__: subclass(cls, _TV_TRANSFORMS) for cls in _TRANSFORM_CLASSES}
    _as_torchvision = types.SimpleNamespace(
        **names,
        InterpolationMode=InterpolationMode,
        IMG_EXTENSIONS=IMG_EXTENSIONS,
        DatasetFolder=tv_dataset_folder,
        ImageFolder=subclass(ImageFolder, _TV_FOLDER, (tv_dataset_folder,), __init__=image_folder_init),
        pil_loader=tv_pil_loader,
        default_loader=tv_default_loader,
        __name__=__name__,
    )
    return _as_torchvision


@functools.cache
def real_torchvision() -> types.SimpleNamespace | None:
    """torchvision's own v1 transforms, ImageFolder and loaders under the names the classes here have, or None
    where torchvision does not import (its build must match torch's)."""
    try:
        from torchvision import datasets, transforms
        from torchvision.datasets import folder
    except (ImportError, OSError, RuntimeError):
        return None
    names = {n: getattr(transforms, n) for n in dir(transforms) if not n.startswith("_")}
    return types.SimpleNamespace(
        **names,
        ImageFolder=datasets.ImageFolder,
        DatasetFolder=datasets.DatasetFolder,
        pil_loader=folder.pil_loader,
        default_loader=folder.default_loader,
        IMG_EXTENSIONS=folder.IMG_EXTENSIONS,
        __name__="torchvision",
    )
