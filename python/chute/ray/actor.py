"""The Ray actor behind chute.ray.RemoteLoader: chute's native engine over the batches the driver assigns.

Each call makes one batch: the driver sends the batch's source indices (a slice of the epoch's global
order, chute/sampler.h) and the epoch; the actor runs them as an explicit epoch order
(``Loader::start_epoch(epoch, 0, order)``). Augmentation draws from (seed, epoch, source index) only, so
the batch's bytes are those chute.Loader makes on one machine, whichever actor makes it, and however often.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

_SOURCE_KINDS = ("ImageFolder", "PackedDataset", "TarDataset", "FileList")


def source_spec(source):
    """What an actor needs to open ``source`` again on its own node: a path, or (kind, argument)."""
    if isinstance(source, (str, os.PathLike)):
        return ("path", os.fspath(source))
    kind = type(source).__name__
    if kind == "ImageFolder":
        return (kind, source.root)
    if kind in ("PackedDataset", "FileList"):
        return (kind, source.path)
    if kind == "TarDataset":
        return (kind, list(source.paths))
    raise TypeError(
        f"RemoteLoader: source must be a path or a chute source (chute.ImageFolder, chute.open(...), "
        f"chute.FileList), got {type(source).__name__}"
    )


def open_source(spec):
    from chute import packed, sources

    kind, arg = spec
    if kind == "path":
        return packed.source_from_path(arg)
    cls = sources.ImageFolder if kind == "ImageFolder" else getattr(packed, kind)
    return cls(arg)


def to_wire(images: torch.Tensor, channels_last: bool) -> np.ndarray:
    """The batch as a contiguous numpy array (what Ray's object store takes without pickling the bytes)."""
    if channels_last:
        images = images.permute(0, 2, 3, 1)  # NHWC memory is contiguous in this order
    if images.dtype == torch.bfloat16:
        images = images.view(torch.int16)  # numpy has no bfloat16: the same bits
    return images.numpy()


def from_wire(array: np.ndarray, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """torch.from_numpy: no copy; the tensor keeps the object-store buffer alive (read-only memory)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable array": the object store's memory
        images = torch.from_numpy(array)
    if dtype == torch.bfloat16:
        images = images.view(torch.bfloat16)
    if channels_last:
        images = images.permute(0, 3, 1, 2)
    return images


class BatchActor:
    """Makes batches with a chute.Loader (explicit orders, one batch per call). Wrapped by ray.remote."""

    def __init__(self, spec, batch_size: int, loader_kwargs: dict, hook=None):
        from chute.loader import Loader

        self._hook = hook  # tests and benchmarks: hook(epoch, indices) before each batch (faults, costs)
        torch.set_num_threads(1)  # torch's own pool is not used here; keep it from oversubscribing
        kwargs = dict(
            loader_kwargs,
            dtype=getattr(torch, loader_kwargs["dtype"]),
            memory_format=getattr(torch, loader_kwargs["memory_format"]),
        )
        self._loader = Loader(open_source(spec), batch_size, pin_memory=False, device="cpu", prefetch=1, **kwargs)
        self._channels_last = kwargs["memory_format"] == torch.channels_last
        self.batches_made = 0

    def pid(self) -> int:
        return os.getpid()

    def engine_stats(self) -> dict:
        """The actor's chute.Loader statistics (its worker threads' stage times)."""
        return dict(self._loader.stats())

    def made(self) -> int:
        """Batches this process made (since its last start)."""
        return self.batches_made

    def batch(self, epoch: int, indices: np.ndarray):
        """``("ok", images, labels, busy_s)``, or ``("error", (index, path, reason, epoch))`` for a bad sample."""
        from chute import _native

        start = time.perf_counter()
        if self._hook is not None:
            self._hook(epoch, indices)
        native = self._loader._native
        native.start_epoch(epoch, 0, np.ascontiguousarray(indices, dtype=np.int64))
        try:
            images, labels = native.next()
        except _native.SampleError:
            return ("error", tuple(native.failed_sample()))
        self.batches_made += 1
        return ("ok", to_wire(images, self._channels_last), labels.numpy(), time.perf_counter() - start)
