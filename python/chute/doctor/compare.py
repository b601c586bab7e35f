"""What a DataLoader is set to, and the loaders the doctor measures beside it: the same DataLoader with a
worker per core, and a chute loader over the same files with the same transforms, where the dataset is
one chute can read (an ImageFolder of images with torchvision's standard transforms)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, RandomSampler

import chute
from chute import _native
from chute.dataloader.base import Fallback
from chute.dataloader.translate import V1, translate


@dataclass
class DataLoaderInfo:
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    start_method: str  # how worker processes start: fork, spawn or forkserver
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
    return DataLoaderInfo(
        dl.num_workers,
        dl.batch_size,
        bool(dl.pin_memory),
        bool(dl.persistent_workers),
        dl.prefetch_factor if dl.num_workers > 0 else None,
        start,
        path,
    )


def with_workers(dl: DataLoader, num_workers: int) -> DataLoader | None:
    """The same DataLoader (dataset, batch size, order, collate) with ``num_workers`` worker processes;
    None when it was built from a custom batch sampler."""
    if dl.batch_size is None:
        return None
    return DataLoader(
        dl.dataset,
        batch_size=dl.batch_size,
        shuffle=isinstance(dl.sampler, RandomSampler),
        num_workers=num_workers,
        collate_fn=dl.collate_fn,
        pin_memory=dl.pin_memory,
        drop_last=dl.drop_last,
        worker_init_fn=dl.worker_init_fn,
        multiprocessing_context=dl.multiprocessing_context if num_workers else None,
        prefetch_factor=2 if num_workers else None,
    )


def torch_equivalent(dl: DataLoader) -> DataLoader | None:
    """torch's own DataLoader with ``dl``'s dataset, batch size, order kind, collate and workers (at least one
    per core when ``dl`` asked for none: torch's best setting for an image pipeline); the alternative to a
    chute.DataLoader fast path. None when it was built from a custom batch sampler."""
    if dl.batch_size is None:
        return None
    workers = dl.num_workers or _native.available_cores()
    return DataLoader(
        dl.dataset,
        batch_size=dl.batch_size,
        shuffle=isinstance(dl.sampler, RandomSampler),
        num_workers=workers,
        collate_fn=dl.collate_fn,
        pin_memory=dl.pin_memory,
        drop_last=dl.drop_last,
        prefetch_factor=dl.prefetch_factor or 2,
    )


def torchvision_modules(dataset) -> tuple[str, ...] | None:
    """For an ImageFolder the doctor takes as torchvision's, the modules whose classes it takes as torchvision's
    v1 transforms: torchvision's own, for torchvision's ImageFolder; that module's too, for an ImageFolder from
    a module that reproduces torchvision's ImageFolder and v1 transforms under their names and says so with
    ``REPRODUCES_TORCHVISION = True`` (chute's PIL reference, the bench's DataLoader peer where torchvision
    does not import). None for any other dataset. Nothing is imported: the doctor knows no such module's name."""
    kind = type(dataset)
    if kind.__name__ != "ImageFolder":
        return None
    if kind.__module__.startswith("torchvision"):
        return (V1,)
    if getattr(sys.modules.get(kind.__module__), "REPRODUCES_TORCHVISION", False) is True:
        return (V1, kind.__module__)
    return None


def chute_equivalent(dl: DataLoader, *, max_threads: int | None = None) -> tuple[chute.Loader | None, str]:
    """A chute loader that yields what ``dl`` yields (same files, labels, transforms, batch size and
    order kind), or None and the reason there is none."""
    dataset = dl.dataset
    modules = torchvision_modules(dataset)
    root = getattr(dataset, "root", None) if modules is not None else None
    if root is None:
        if isinstance(dataset, torch.utils.data.TensorDataset):
            return (
                None,
                "a TensorDataset: chute.DataLoader gathers it natively (change the import), chute.Loader reads images",
            )
        return None, f"chute does not recognise a {type(dataset).__name__} (it reads ImageFolder trees)"
    if dl.batch_size is None:
        return None, "the DataLoader uses a custom batch sampler"
    if getattr(dataset, "target_transform", None) is not None:
        return None, "the dataset has a target_transform"
    # The DataLoader fast path's translator: the same pipelines qualify, with the same reasons when not.
    translated = translate(getattr(dataset, "transform", None), "pil", v1_modules=modules)
    if isinstance(translated, Fallback):
        return None, f"its transforms: {translated}"
    transforms, dtype = translated
    root = os.fspath(root)
    source = chute.ImageFolder(root)
    if len(source) != len(dataset):
        return None, f"chute finds {len(source)} images under {root}, the dataset {len(dataset)}"
    loader = chute.Loader(
        source,
        dl.batch_size,
        shuffle=isinstance(dl.sampler, RandomSampler),
        drop_last=dl.drop_last,
        transforms=transforms,
        dtype=dtype,
        max_threads=max_threads,
    )
    return loader, ""
