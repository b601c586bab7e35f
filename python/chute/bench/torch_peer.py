"""The PyTorch DataLoader peer that chute is benchmarked against: torchvision's ``ImageFolder`` and its
standard train and eval transforms, or, where torchvision does not import, the PIL reference of them
(:mod:`chute.bench.pil_reference`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from torch.utils.data import DataLoader, Dataset

from chute.bench import pil_reference

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _torchvision():
    return pil_reference.real_torchvision()


def uses_torchvision() -> bool:
    """Return True when the peer runs on real torchvision."""
    return _torchvision() is not None


def _modules():
    return _torchvision() or pil_reference


def make_train_transform() -> Callable:
    """Return ``RandomResizedCrop(224)`` + flip + ``ToTensor`` + ``Normalize``."""
    t = _modules()
    return t.Compose(
        [t.RandomResizedCrop(224), t.RandomHorizontalFlip(), t.ToTensor(), t.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )


def make_eval_transform() -> Callable:
    """Return ``Resize(256)`` + ``CenterCrop(224)`` + ``ToTensor`` + ``Normalize``."""
    t = _modules()
    return t.Compose([t.Resize(256), t.CenterCrop(224), t.ToTensor(), t.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def make_peer_dataset(root: str | os.PathLike, train: bool = True) -> Dataset:
    """Return an ImageFolder over ``root`` with the train or eval transform."""
    transform = make_train_transform() if train else make_eval_transform()
    return _modules().ImageFolder(os.fspath(root), transform=transform)


def make_dataloader(
    root: str | os.PathLike,
    *,
    batch_size: int = 256,
    num_workers: int = 0,
    prefetch_factor: int = 2,
    pin_memory: bool = False,
    persistent_workers: bool = True,
    train: bool = True,
) -> DataLoader:
    """A shuffling DataLoader over ``root``, configured the way users tune it."""
    multiprocess = num_workers > 0
    return DataLoader(
        make_peer_dataset(Path(root), train=train),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor if multiprocess else None,
        persistent_workers=persistent_workers and multiprocess,
    )
