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

The engine is built from the driver's options object (``chute._native.LoaderOptions``, pickled whole), so
its prefetch (the batches made ahead: ``prefetch``, automatic by default), threads, memory budget and error
policy are those the user gave RemoteLoader. Errors: under ``on_error='raise'`` a bad sample's batch comes
back as ``("error", (index, path, reason, epoch))`` and the engine goes on with the next batch, as
chute.Loader's does. Under ``'skip'`` the batch comes back without its bad samples, which are listed; the
engine, having filled that batch from the next one, is restarted on the plan's next batch, so that every
batch it makes is again exactly one of the driver's; the driver re-packs the short batches (repack.py).
"""

from __future__ import annotations

import os
import time
from collections import deque

import numpy as np
import torch


def source_spec(source):
    """What an actor needs to open ``source`` again on its own node: a path, or (kind, argument)."""
    if isinstance(source, (str, os.PathLike)):
        return ("path", os.fspath(source))
    kind = type(source).__name__
    if kind == "ImageFolder":
        return (kind, source.root)
    if kind in ("PackedDataset", "FileList"):
        return (kind, source.path)
    if kind == "TarDataset":  # a remote one by its URL, opened again there
        return ("path", source.url) if source.url is not None else (kind, list(source.paths))
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
    """Makes batches with chute's native engine running the actor's plan (see above). Wrapped by ray.remote.

    ``options`` is the driver's ``chute._native.LoaderOptions``, built once by ``chute._options.build`` and
    pickled whole: the engine here is made from exactly what the driver checked."""

    def __init__(self, spec, options, transforms, hook=None):
        from chute import _native, _options

        self._hook = hook  # tests and benchmarks: hook(epoch, indices) before each batch (faults, costs)
        torch.set_num_threads(1)  # torch's own pool is not used here; keep it from oversubscribing
        self._batch_size = options.batch_size
        self._channels_last = options.channels_last
        try:
            self._native = _native.Loader(open_source(spec)._native, _options.native_transforms(transforms), options)
            self._refused: Exception | None = None
        except Exception as e:  # start() raises it in the driver, as itself (Ray keeps its type and message)
            self._native, self._refused = None, e
        self._epoch: int | None = None  # the epoch the engine runs
        self._plan: deque[np.ndarray] = deque()  # the batches it makes, in order (source indices each)
        # on_error='skip': the samples the engine skipped and no batch has reported yet, by source index
        # (each index is once in an epoch, so a sample found again after a restart is the same entry).
        self._skipped: dict[int, tuple] = {}
        self._errors_read = 0  # the engine's errors() already in _skipped
        self.batches_made = 0
        self.restarts = 0  # engine restarts for a batch that was not the plan's next

    def pid(self) -> int:
        return os.getpid()

    def start(self) -> tuple[int, list[str]]:
        """The actor's pid and what its engine changed from the options (Loader::notices(): a prefetch
        lowered to fit max_memory); or the error that kept the engine from being built (a source the actor
        cannot open, options the engine refuses: a ValueError naming them)."""
        if self._refused is not None:
            raise self._refused
        return os.getpid(), list(self._native.notices)

    def engine_stats(self) -> dict:
        """The actor's engine statistics (its worker threads' stage times), and its plan restarts."""
        return dict(self._native.stats(), plan_restarts=self.restarts)

    def made(self) -> int:
        """Batches this process returned (since its last start)."""
        return self.batches_made

    def _start(self, epoch: int, batches) -> None:
        """Runs the engine over ``batches`` (arrays of source indices; only the last may be short)."""
        if epoch != self._epoch:
            self._skipped.clear()  # (a sample of another epoch: reported with its batch, or never asked for)
        self._epoch, self._plan = epoch, deque(batches)
        order = np.concatenate(list(self._plan)) if self._plan else np.empty(0, np.int64)
        self._native.start_epoch(epoch, 0, np.ascontiguousarray(order, dtype=np.int64))

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

    def _skipped_in(self, epoch: int, indices: np.ndarray) -> list[tuple]:
        """The samples of ``indices`` the engine skipped, in order: ``(index, path, reason, epoch)`` each.
        Complete once the engine delivered the batch that starts with this one's first sample (the engine's
        order is aligned on the plan's batches: see batch()): a batch is delivered only once every sample
        before its last one was placed or skipped, and it holds this batch's samples that were not."""
        for error in self._native.errors(self._errors_read):
            self._errors_read += 1
            if error[3] == epoch:
                self._skipped[error[0]] = tuple(error)
        return [self._skipped.pop(i) for i in indices.tolist() if i in self._skipped]

    def batch(self, epoch: int, indices: np.ndarray, plan: np.ndarray | None = None):
        """``("ok", images, labels, busy_s, skipped)``, or ``("error", (index, path, reason, epoch))`` for a
        bad sample under on_error='raise'. ``plan``: the source indices of the batches the driver means to
        ask this actor for in this epoch, in order, starting with this one. Under on_error='skip' a bad
        sample is left out: ``images`` holds the batch's other samples, in order, and ``skipped`` lists the
        bad ones (the driver fills batches from the next ones, as chute.Loader does)."""
        from chute.errors import SampleError

        if self._refused is not None:
            raise self._refused
        start = time.perf_counter()
        if self._hook is not None:
            self._hook(epoch, indices)
        self._schedule(epoch, indices, plan)
        native = self._native
        self._plan.popleft()
        try:
            batch = native.next()
        except SampleError as e:  # the engine goes on with the next batch (on_error='raise')
            return ("error", (e.index, e.path, e.reason, e.epoch))
        except BaseException:
            self._epoch = None  # any other error ends the engine's epoch
            raise
        skipped = self._skipped_in(epoch, indices)
        kept = len(indices) - len(skipped)
        if batch is None and kept:  # the plan and the engine disagree: a bug, never a short epoch
            self._epoch = None
            raise RuntimeError(f"RemoteLoader actor: the engine ended before batch {indices[:4]}... of epoch {epoch}")
        if skipped and self._plan:
            # on_error='skip' filled this batch from the plan's next one: restart the engine there, so that
            # its batches line up with the plan's again (this costs the work it had done ahead).
            self._start(epoch, list(self._plan))
        self.batches_made += 1
        busy = time.perf_counter() - start
        if not kept:  # every sample of the batch was skipped
            return ("ok", None, None, busy, skipped)
        images, labels = batch
        images, labels = images[:kept], labels[:kept]  # views; the whole batch when nothing was skipped
        return ("ok", to_wire(images, self._channels_last), labels.numpy(), busy, skipped)
