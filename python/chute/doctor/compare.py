"""What a DataLoader is set to, and the loaders the doctor measures beside it: the same DataLoader with a
worker per core; for a torch DataLoader whose pipeline chute.DataLoader runs on a native fast path, that
drop-in (the same arguments, one import changed); else a chute loader over the same files with the same
transforms, where the dataset is one chute can read (an ImageFolder of images with torchvision's standard
transforms); and, for a chute.DataLoader on a fast path, torch's own DataLoader."""

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

# The label of the drop-in's run (dropin_equivalent), followed by its fast path: the advice names the change by it.
DROPIN_LABEL = "chute.DataLoader drop-in"


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


def rebuilt(dl: DataLoader, cls=DataLoader, *, num_workers: int, prefetch_factor: int | None) -> DataLoader | None:
    """``dl``'s dataset, batch size, order kind, collate, pinning, drop_last and worker_init_fn in a new
    ``cls`` (torch's DataLoader or chute's) with ``num_workers``; None when ``dl`` was built from a custom
    batch sampler (its sampler cannot be rebuilt)."""
    if dl.batch_size is None:
        return None
    return cls(
        dl.dataset,
        batch_size=dl.batch_size,
        shuffle=isinstance(dl.sampler, RandomSampler),
        num_workers=num_workers,
        collate_fn=dl.collate_fn,
        pin_memory=dl.pin_memory,
        drop_last=dl.drop_last,
        worker_init_fn=dl.worker_init_fn,
        multiprocessing_context=dl.multiprocessing_context if num_workers else None,
        prefetch_factor=prefetch_factor if num_workers else None,
    )


def with_workers(dl: DataLoader, num_workers: int) -> DataLoader | None:
    """The same DataLoader with ``num_workers`` worker processes (torch's DataLoader)."""
    return rebuilt(dl, num_workers=num_workers, prefetch_factor=2)


def torch_equivalent(dl: DataLoader) -> DataLoader | None:
    """torch's own DataLoader with ``dl``'s settings and workers (at least one per core when ``dl`` asked for
    none: torch's best setting for an image pipeline); the alternative to a chute.DataLoader fast path."""
    return rebuilt(dl, num_workers=dl.num_workers or _native.available_cores(), prefetch_factor=dl.prefetch_factor or 2)


def dropin_equivalent(dl: DataLoader) -> tuple[DataLoader | None, str]:
    """``chute.DataLoader`` with a torch DataLoader's arguments (the one-import change) and the fast path it
    takes for them (its kind); else None and why not. Its prefetch is chute's automatic one (torch's
    ``prefetch_factor`` of 2 per worker is its default, not a choice the user made)."""
    if isinstance(dl, chute.DataLoader):
        return None, "it is chute.DataLoader already"
    dropin = rebuilt(dl, chute.DataLoader, num_workers=dl.num_workers, prefetch_factor=None)
    if dropin is None:
        return None, "the DataLoader uses a custom batch sampler"
    from chute.dataloader import plan as seam  # the seam itself: no warning logged for a loader never used

    plan = seam.choose(dropin)
    if isinstance(plan, Fallback):
        return None, f"chute.DataLoader would take its generic path: {plan}"
    plan.close()  # the drop-in plans again when it is iterated
    return dropin, plan.kind


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
            return None, "a TensorDataset: chute.Loader reads images (chute.DataLoader gathers tensor datasets)"
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
