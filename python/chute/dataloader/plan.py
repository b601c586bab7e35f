"""The seam of ``chute.DataLoader``: which path runs a DataLoader, decided once.

``choose(loader)`` looks at a DataLoader and returns a :class:`~chute.dataloader.base.Plan` when a native
path gives batches provably identical to what torch's DataLoader would yield, else a
:class:`~chute.dataloader.base.Fallback` whose ``str()`` is the one-line reason (then the generic path
runs: iterator.py, worker.py, arena.py). Either way the DataLoader's own sampler decides the order:
``Plan.batches`` takes the batch sampler's index lists and yields the collated batches in that order.

The paths:

* ``"tensor"`` (tensor_path.py): a ``TensorDataset`` or a dataset with ``chute_columns``, gathered natively;
* ``"imagefolder"`` (folder_path.py): a torchvision ``ImageFolder`` / ``DatasetFolder`` with the default PIL
  loader (or ``decode_image``) and a ``Compose`` of supported transforms (translate.py), on chute's engine;
* ``"chute"`` (source_path.py): chute's own datasets (``chute.ImageFolder``, ``chute.open``'s) with a
  torchvision ``transform=``, on the same engine path, reading the dataset's native source;
* a ``Subset`` of either: that path, with the subset's indices mapped first.

Fast paths need automatic batching (``batch_size`` not None) with the default collate, and a map-style
dataset. One custom collate_fn is run natively too, on the ImageFolder path: torchvision's reference recipe,
``lambda batch: mixup_cutmix(*default_collate(batch))`` with a v2 MixUp / CutMix / RandomChoice (mixing.py). No worker process is started: ``num_workers`` and ``persistent_workers`` are then only hints. A
``prefetch_factor`` given explicitly keeps torch's meaning on the ImageFolder path: ``prefetch_factor *
num_workers`` batches are prepared ahead of the consumer (the engine's prefetch, ``stats()["prefetch"]``);
left unset (torch's default, 2 per worker) prefetch is chute's automatic one, which grows while workers
idle and the consumer waits, within the engine's memory budget. ``prefetch_factor=0``, which torch's
DataLoader accepts but refuses when iterating, takes the generic path, so that it fails as in torch. A ``worker_init_fn`` with ``num_workers > 0`` therefore falls back: torch calls it in
every worker, and a caller may rely on that (with ``num_workers=0`` torch never calls it, nor does chute).
``CHUTE_FAST_PATHS=0`` in the environment turns the fast paths off (to compare, or to rule them out).

Pinning is decided in one place for every path: torch's own iterator base (``_BaseDataLoaderIter``, which
each of chute's iterators is), from ``pin_memory`` and the current accelerator; every path then copies each
batch into torch's pinned host memory with torch's ``pin_memory()``, a fast path on a pin thread one batch
ahead of the iterating thread (pinning.py).
"""

from __future__ import annotations

import os

import numpy as np
from torch.utils.data import IterableDataset, Subset, default_collate

from chute.dataloader import folder_path, mixing, source_path, tensor_path
from chute.dataloader.base import Fallback, Plan, RaiseInPlace

__all__ = ["Fallback", "Plan", "RaiseInPlace", "SubsetPlan", "choose", "plan_dataset"]


def choose(loader) -> Plan | Fallback:
    """The fast path for ``loader`` (a ``torch.utils.data.DataLoader``), or why there is none."""
    if os.environ.get("CHUTE_FAST_PATHS", "1") == "0":
        return Fallback("native fast paths are off (CHUTE_FAST_PATHS=0)")
    if isinstance(loader.dataset, IterableDataset):
        return Fallback("iterable-style dataset: its samples come from its own iterator, not from indices")
    if not getattr(loader, "_auto_collation", True):
        return Fallback(
            "batch_size=None (no automatic batching): samples are converted one by one, not collated",
            "pass a batch_size",
        )
    batch_transform = None
    if loader.collate_fn is not default_collate:  # chute.dataloader.default_collate is torch's own
        batch_transform = mixing.recognise(loader.collate_fn)  # never calls it
        if isinstance(batch_transform, Fallback):
            return batch_transform
        if batch_transform is None:
            name = getattr(loader.collate_fn, "__qualname__", type(loader.collate_fn).__name__)
            return Fallback(
                f"custom collate_fn {name}: only default_collate batches, and the reference recipe's "
                f"MixUp/CutMix ({mixing.REFERENCE_SHAPE}), are made natively",
                "leave collate_fn unset and post-process each batch in the loop",
            )
    if loader.worker_init_fn is not None and loader.num_workers > 0:
        return Fallback(
            "worker_init_fn is set: torch calls it in each worker process, and a fast path starts none",
            "drop worker_init_fn if it only seeds RNGs (the fast path keys its randomness itself)",
        )
    factor = getattr(loader, "_chute_prefetch_factor", None)  # explicit prefetch_factor, None when unset
    if factor == 0:
        return Fallback(
            "prefetch_factor=0: torch's DataLoader refuses it when iterating, and so does the generic path",
            "leave prefetch_factor unset (automatic prefetch) or give it a positive value",
        )
    prefetch = factor * loader.num_workers if factor is not None else 0
    return plan_dataset(loader.dataset, loader.batch_size or 1, prefetch, batch_transform)


def plan_dataset(
    dataset, batch_size: int, prefetch: int = 0, batch_transform: mixing.BatchTransform | None = None
) -> Plan | Fallback:
    """The fast path for ``dataset`` batched by ``batch_size``, or why there is none. ``prefetch``: batches
    prepared ahead on an engine path (ImageFolder), 0 for automatic; the tensor path gathers on demand.
    ``batch_transform``: a MixUp / CutMix collate recognised by mixing.py, run on the ImageFolder path."""
    if _is_subset(dataset):
        return SubsetPlan.create(dataset, batch_size, prefetch, batch_transform)
    if isinstance(dataset, IterableDataset):
        return Fallback("iterable-style dataset: its samples come from its own iterator, not from indices")
    if getattr(dataset, "__getitems__", None):
        return Fallback(
            f"{type(dataset).__name__} defines __getitems__, which torch's fetcher calls instead of __getitem__"
        )
    tensor = tensor_path.plan_dataset(dataset)
    if tensor is not None and batch_transform is not None:
        return Fallback("MixUp/CutMix in collate_fn run natively on the ImageFolder path only, not on tensor datasets")
    if tensor is not None:
        return tensor
    for path in (source_path, folder_path):
        plan = path.plan_dataset(dataset, batch_size, prefetch, batch_transform)
        if plan is not None:
            return plan
    return Fallback(
        f"{type(dataset).__module__}.{type(dataset).__qualname__} has no native fast path "
        "(TensorDataset, chute_columns, torchvision ImageFolder/DatasetFolder, chute's datasets have)",
        "give the dataset a chute_columns attribute if its samples are rows of tensors",
    )


# ---- Subset of a supported dataset -------------------------------------------------------------------


def _is_subset(dataset) -> bool:
    """A torch Subset whose indexing is torch's own (a subclass may change what an index means)."""
    t = type(dataset)
    return (
        isinstance(dataset, Subset)
        and t.__getitem__ is Subset.__getitem__
        and getattr(t, "__getitems__", None) is getattr(Subset, "__getitems__", None)
    )


class SubsetPlan(Plan):
    """``Subset(dataset, indices)`` of a dataset with a fast path: that path, with each batch's indices
    mapped through ``indices`` first (what ``Subset.__getitem__`` does, sample by sample)."""

    @classmethod
    def create(cls, subset, batch_size: int, prefetch: int = 0, batch_transform=None) -> Plan | Fallback:
        try:
            indices = np.asarray(subset.indices)
        except Exception as e:  # e.g. a list of mixed types
            return Fallback(f"Subset.indices cannot be read as integers ({type(e).__name__}: {e})")
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            return Fallback(
                f"Subset.indices is not a 1-d list of integers (dtype {indices.dtype}, shape {indices.shape})"
            )
        inner = plan_dataset(subset.dataset, batch_size, prefetch, batch_transform)
        if isinstance(inner, Fallback):
            return Fallback(f"Subset of a dataset without a fast path: {inner}", inner.hint)
        return cls(subset, inner, indices.astype(np.int64).tolist(), batch_size, prefetch, batch_transform)

    def __init__(
        self, subset, inner: Plan, indices: list[int], batch_size: int, prefetch: int = 0, batch_transform=None
    ):
        self._dataset = subset
        self._inner = inner
        self._indices = indices
        self._batch_size = batch_size
        self._prefetch = prefetch
        self._batch_transform = batch_transform
        self.kind = inner.kind
        self.held_batches = inner.held_batches
        self._made_from = self._fingerprint()

    def _map(self, index_batches):
        indices, n = self._indices, len(self._indices)
        # An index outside the subset becomes one outside the dataset: the inner path raises IndexError
        # at that batch, after the batches before it (as torch's Subset raises at its own).
        outside = len(self._inner._dataset)
        for batch in index_batches:
            yield [indices[i] if -n <= i < n else outside for i in map(int, batch)]

    def _batches(self, index_batches, base_seed, epoch):
        return self._inner.batches(self._map(index_batches), base_seed, epoch)

    def _closed(self) -> bool:
        return self._inner._closed()

    def _fingerprint(self) -> tuple:
        return (self._dataset.dataset, self._dataset.indices)

    def _replan(self) -> Plan | Fallback:
        return plan_dataset(self._dataset, self._batch_size, self._prefetch, self._batch_transform)

    def stats(self) -> dict:
        return self._inner.stats()

    def close(self) -> None:
        inner = getattr(self, "_inner", None)
        if inner is not None:
            inner.close()
