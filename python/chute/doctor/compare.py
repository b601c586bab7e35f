"""What a DataLoader is set to, and the loaders the doctor measures beside it: the same DataLoader with a
worker per core, and a chute loader over the same files with the same transforms, where the dataset is
one chute can read (an ImageFolder of images with torchvision's standard transforms)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, RandomSampler

import chute
from chute import _native


@dataclass
class DataLoaderInfo:
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    start_method: str       # how worker processes start: fork, spawn or forkserver
    path: str | None = None  # chute.DataLoader: "generic" or "fast:<kind>" (which then starts no workers)

    @property
    def fast_path(self) -> bool:
        return bool(self.path) and self.path.startswith("fast:")

    @property
    def num_workers_running(self) -> int:
        """Worker processes that actually run: none on a chute.DataLoader fast path."""
        return 0 if self.fast_path else self.num_workers

    @property
    def in_flight_batches(self) -> int:
        """Batches the workers prepare ahead: ``prefetch_factor x num_workers`` (the main process itself
        prepares one at a time)."""
        return (self.prefetch_factor or 0) * self.num_workers

    def in_flight_bytes(self, batch_bytes: int) -> int:
        """Shared memory those batches hold (pinned copies come on top with ``pin_memory``)."""
        return self.in_flight_batches * batch_bytes


def dataloader_info(dl: DataLoader) -> DataLoaderInfo:
    import multiprocessing

    context = dl.multiprocessing_context
    start = context.get_start_method() if context is not None else multiprocessing.get_start_method()
    path = dl.stats().get("path") if isinstance(dl, chute.DataLoader) else None
    return DataLoaderInfo(dl.num_workers, dl.batch_size, bool(dl.pin_memory), bool(dl.persistent_workers),
                          dl.prefetch_factor if dl.num_workers > 0 else None, start, path)


def with_workers(dl: DataLoader, num_workers: int) -> DataLoader | None:
    """The same DataLoader (dataset, batch size, order, collate) with ``num_workers`` worker processes;
    None when it was built from a custom batch sampler."""
    if dl.batch_size is None:
        return None
    return DataLoader(dl.dataset, batch_size=dl.batch_size, shuffle=isinstance(dl.sampler, RandomSampler),
                      num_workers=num_workers, collate_fn=dl.collate_fn, pin_memory=dl.pin_memory,
                      drop_last=dl.drop_last, worker_init_fn=dl.worker_init_fn,
                      multiprocessing_context=dl.multiprocessing_context if num_workers else None,
                      prefetch_factor=2 if num_workers else None)


def torch_equivalent(dl: DataLoader) -> DataLoader | None:
    """torch's own DataLoader with ``dl``'s dataset, batch size, order kind, collate and workers (at least one
    per core when ``dl`` asked for none: torch's best setting for an image pipeline); the alternative to a
    chute.DataLoader fast path. None when it was built from a custom batch sampler."""
    if dl.batch_size is None:
        return None
    workers = dl.num_workers or _native.available_cores()
    return DataLoader(dl.dataset, batch_size=dl.batch_size, shuffle=isinstance(dl.sampler, RandomSampler),
                      num_workers=workers, collate_fn=dl.collate_fn, pin_memory=dl.pin_memory,
                      drop_last=dl.drop_last, prefetch_factor=dl.prefetch_factor or 2)


def _root_of(dataset) -> str | None:
    """The root of an ImageFolder-like dataset: torchvision's ImageFolder or the bench's PIL stand-in."""
    kind = type(dataset)
    known = (kind.__name__ == "ImageFolder" and kind.__module__.startswith("torchvision")) or (
        kind.__name__ == "PilImageFolder" and kind.__module__ == "chute.bench.torch_peer")
    root = getattr(dataset, "root", None)
    return os.fspath(root) if known and root is not None else None


def chute_transforms(transform) -> tuple[list, torch.dtype]:
    """chute's equivalent of a torchvision-style pipeline (torchvision's classes or the bench's stand-ins,
    recognised by name and arguments), and the output dtype; ``ValueError`` naming what has none."""
    items = getattr(transform, "transforms", None)
    items = list(items) if items is not None else ([transform] if transform is not None else [])
    out, dtype = [], None
    for t in items:
        name = type(t).__name__
        if dtype is not None and name != "Normalize":
            raise ValueError(f"{name} after ToTensor has no chute equivalent")
        if name == "RandomResizedCrop":
            out.append(chute.RandomResizedCrop(t.size, scale=t.scale, ratio=t.ratio,
                                               interpolation=getattr(t, "interpolation", "bilinear")))
        elif name == "Resize":
            out.append(chute.Resize(t.size, interpolation=getattr(t, "interpolation", "bilinear"),
                                    max_size=getattr(t, "max_size", None)))
        elif name == "CenterCrop":
            out.append(chute.CenterCrop(t.size))
        elif name == "RandomHorizontalFlip":
            out.append(chute.RandomHorizontalFlip(t.p))
        elif name == "ToTensor":
            dtype = torch.float32
        elif name == "PILToTensor":
            dtype = torch.uint8
        elif name == "Normalize" and dtype is torch.float32:
            out.append(chute.Normalize(t.mean, t.std))
        else:
            raise ValueError(f"{name} has no chute equivalent")
    if dtype is None:
        raise ValueError("the transforms end in a PIL image, not a tensor")
    return out, dtype


def chute_equivalent(dl: DataLoader, *, max_threads: int | None = None) -> tuple[chute.Loader | None, str]:
    """A chute loader that yields what ``dl`` yields (same files, labels, transforms, batch size and
    order kind), or None and the reason there is none."""
    dataset = dl.dataset
    root = _root_of(dataset)
    if root is None:
        if isinstance(dataset, torch.utils.data.TensorDataset):
            return None, "a TensorDataset: chute.DataLoader gathers it natively (change the import), chute.Loader reads images"
        return None, f"chute does not recognise a {type(dataset).__name__} (it reads ImageFolder trees)"
    if dl.batch_size is None:
        return None, "the DataLoader uses a custom batch sampler"
    if getattr(dataset, "target_transform", None) is not None:
        return None, "the dataset has a target_transform"
    try:
        transforms, dtype = chute_transforms(getattr(dataset, "transform", None))
    except (TypeError, ValueError) as e:  # chute's transforms name an argument they cannot take
        return None, f"its transforms: {e}"
    source = chute.ImageFolder(root)
    if len(source) != len(dataset):
        return None, f"chute finds {len(source)} images under {root}, the dataset {len(dataset)}"
    loader = chute.Loader(source, dl.batch_size, shuffle=isinstance(dl.sampler, RandomSampler),
                          drop_last=dl.drop_last, transforms=transforms, dtype=dtype, max_threads=max_threads)
    return loader, ""
