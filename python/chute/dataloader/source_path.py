"""chute's own datasets with torchvision transforms, run natively from their source (the ``"chute"`` fast path).

``chute.ImageFolder(root, transform=...)`` and ``chute.open(path, transform=...)`` (packed shards, tar /
WebDataset shards, TFRecord, LMDB) are map datasets whose ``dataset[i]`` is torchvision's sample,
``(transform(PIL image), label)`` (sources.py). Under ``chute.DataLoader`` the same pipeline runs in chute's
engine, reading the dataset's own native source (not a list of files: a packed dataset has none), with the
same translation of the transforms as a torchvision ImageFolder (translate.py) and the same engine path
(folder_path.FolderPlan: order from the DataLoader's sampler, seeds, errors, held batches, MixUp / CutMix).

A dataset qualifies when its class's ``__getitem__`` is chute's (a subclass may add attributes, not change
samples), ``target_transform`` is None (labels are made natively), and ``transform`` translates; a record
dataset without transforms returns encoded bytes, which no native pipeline makes. With PIL's
``LOAD_TRUNCATED_IMAGES`` set, a record dataset falls back (chute accepts truncated JPEGs as PIL does, not
PNG or WebP, and a record's format is known only by reading it); an ImageFolder falls back only if it holds
PNG or WebP files, as the torchvision path does.
"""

from __future__ import annotations

import os

from chute.dataloader import mixing
from chute.dataloader.base import Fallback, Plan
from chute.dataloader.folder_path import FolderPlan, native_pipeline, pil_load_truncated_images, pil_max_pixels
from chute.sources import ImageFolder, NativeSource, RecordSource


def plan_dataset(
    dataset, batch_size: int, prefetch: int = 0, batch_transform: mixing.BatchTransform | None = None
) -> Plan | Fallback | None:
    """The ``"chute"`` plan for a chute dataset (None for any other dataset)."""
    if not isinstance(dataset, NativeSource):
        return None
    name = type(dataset).__name__
    own = next((c for c in (ImageFolder, RecordSource) if isinstance(dataset, c)), None)
    if own is None:
        return Fallback(f"chute.{name} is not a map dataset (chute.ImageFolder and chute.open's datasets are)")
    if type(dataset).__getitem__ is not own.__getitem__:
        return Fallback(f"{name} overrides __getitem__: its samples are not chute's")
    if dataset.transform is None and dataset.target_transform is None and own is RecordSource:
        return Fallback(
            f"{name} without transform= returns each record's encoded bytes",
            "open it with transform= (torchvision's), e.g. chute.open(path, transform=...), to get images",
        )
    pipeline = native_pipeline(dataset, "pil", batch_transform)
    if isinstance(pipeline, Fallback):
        return pipeline
    transforms, dtype = pipeline
    if pil_load_truncated_images():
        other = (
            next((p for p in dataset._native.names() if os.fsdecode(p).lower().endswith((".png", ".webp"))), None)
            if own is ImageFolder
            else f"a record of {name}"
        )
        if other is not None:
            return Fallback(
                f"PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set and {other} may be a PNG or WebP image: chute loads "
                "truncated JPEGs as PIL does under that flag, not truncated PNG or WebP files",
                hint="leave LOAD_TRUNCATED_IMAGES unset (a truncated file then raises, naming it) to take the fast path",
            )
    try:
        return SourcePlan(
            dataset,
            dataset._native if len(dataset) else None,
            transforms,
            dtype,
            batch_size,
            prefetch=prefetch,
            batch_transform=batch_transform,
        )
    except ValueError as e:  # a pipeline chute's engine refuses (e.g. no fixed output size)
        return Fallback(f"the transforms do not make a native pipeline: {e}")


class SourcePlan(FolderPlan):
    """The ImageFolder path's engine over a chute dataset's own source."""

    kind = "chute"

    def _fingerprint(self) -> tuple:
        d = self._dataset
        return (d.transform, d.target_transform, d._native, pil_load_truncated_images(), pil_max_pixels())

    def _replan(self) -> Plan | Fallback:
        return plan_dataset(self._dataset, self._batch_size, self._prefetch, self._batch_transform)
