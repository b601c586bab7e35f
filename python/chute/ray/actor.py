"""The Ray actor behind chute.ray.RemoteLoader: chute's native engine over the batches the driver assigns.

Each call returns one batch: the driver sends the batch's source indices (a slice of the epoch's global
order, chute/sampler.h) and the epoch. Augmentation draws from (seed, epoch, source index) only, so the
batch's bytes are those chute.Loader makes on one machine, whichever actor makes it, and however often.

The engine works ahead of the calls. The first call of an epoch to an actor carries the actor's *plan*:
the batches the driver means to ask it for, in order (its round-robin share of the epoch). The actor runs
them as one explicit epoch order (``Loader::start_epoch(epoch, 0, order)``) with ``prefetch`` batches made
ahead, so its decode threads go on with the next batches while Ray serialises a finished one into the
object store and delivers the next call. A call for a batch that is not the plan's next (a batch resent
after another actor died, or one the driver sent elsewhere) restarts the engine on that batch followed by
the rest of the plan: the bytes never depend on the plan, only how much work runs ahead.
"""

from __future__ import annotations

import os
import time
from collections import deque

import numpy as np
import torch

_SOURCE_KINDS = ("ImageFolder", "PackedDataset", "TarDataset", "FileList")
PREFETCH = 2  # batches an actor's engine makes ahead of the calls (in the actor's memory, not the object store)


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
    from chute import resolve, sources

    kind, arg = spec
    if kind == "path":
        return resolve.source_from_path(arg)
    return getattr(sources, kind)(arg)


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
    """Makes batches with a chute.Loader running the actor's plan (see above). Wrapped by ray.remote."""

    def __init__(self, spec, batch_size: int, loader_kwargs: dict, hook=None):
        from chute.loader import Loader

        self._hook = hook  # tests and benchmarks: hook(epoch, indices) before each batch (faults, costs)
        torch.set_num_threads(1)  # torch's own pool is not used here; keep it from oversubscribing
        kwargs = dict(
            loader_kwargs,
            dtype=getattr(torch, loader_kwargs["dtype"]),
            memory_format=getattr(torch, loader_kwargs["memory_format"]),
        )
        self._batch_size = batch_size
        self._loader = Loader(
            open_source(spec), batch_size, pin_memory=False, device="cpu", prefetch=PREFETCH, **kwargs
        )
        self._channels_last = kwargs["memory_format"] == torch.channels_last
        self._epoch: int | None = None  # the epoch the engine runs
        self._plan: deque[np.ndarray] = deque()  # the batches it makes, in order (source indices each)
        self.batches_made = 0
        self.restarts = 0  # engine restarts for a batch that was not the plan's next

    def pid(self) -> int:
        return os.getpid()

    def engine_stats(self) -> dict:
        """The actor's chute.Loader statistics (its worker threads' stage times), and its plan restarts."""
        return dict(self._loader.stats(), plan_restarts=self.restarts)

    def made(self) -> int:
        """Batches this process returned (since its last start)."""
        return self.batches_made

    def _start(self, epoch: int, batches) -> None:
        """Runs the engine over ``batches`` (arrays of source indices; only the last may be short)."""
        self._epoch, self._plan = epoch, deque(batches)
        order = np.concatenate(list(self._plan)) if self._plan else np.empty(0, np.int64)
        self._loader._native.start_epoch(epoch, 0, np.ascontiguousarray(order, dtype=np.int64))

    def _schedule(self, epoch: int, indices: np.ndarray, plan) -> None:
        """Makes the engine's next batch the one with ``indices``."""
        if plan is not None:  # the first call of an epoch: the plan starts with this batch
            self._start(epoch, [plan[lo : lo + self._batch_size] for lo in range(0, len(plan), self._batch_size)])
        if self._epoch == epoch:
            for k, batch in enumerate(self._plan):
                if np.array_equal(batch, indices):
                    if k:  # the driver sent the batches before it elsewhere
                        self.restarts += 1
                        self._start(epoch, list(self._plan)[k:])
                    return
        # Not in the plan: this batch first, then the rest of the plan. A short batch (the epoch's last) must
        # end the engine's order, so after one the plan is dropped and later calls restart the engine.
        self.restarts += 1
        rest = list(self._plan) if len(indices) == self._batch_size else []
        self._start(epoch, [indices] + rest)

    def batch(self, epoch: int, indices: np.ndarray, plan: np.ndarray | None = None):
        """``("ok", images, labels, busy_s)``, or ``("error", (index, path, reason, epoch))`` for a bad
        sample. ``plan``: the source indices of the batches the driver means to ask this actor for in this
        epoch, in order, starting with this one."""
        from chute import _native

        start = time.perf_counter()
        if self._hook is not None:
            self._hook(epoch, indices)
        self._schedule(epoch, indices, plan)
        native = self._loader._native
        self._plan.popleft()
        try:
            batch = native.next()
        except _native.SampleError:  # the engine goes on with the next batch (on_error='raise')
            return ("error", tuple(native.failed_sample()))
        except BaseException:
            self._epoch = None  # any other error ends the engine's epoch
            raise
        if batch is None:  # the plan and the engine disagree: a bug, never a short epoch
            self._epoch = None
            raise RuntimeError(f"RemoteLoader actor: the engine ended before batch {indices[:4]}... of epoch {epoch}")
        images, labels = batch
        self.batches_made += 1
        return ("ok", to_wire(images, self._channels_last), labels.numpy(), time.perf_counter() - start)
