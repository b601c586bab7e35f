"""How ``chute.DataLoader(pin_memory=True)`` pins its batches: off the training thread, as torch does.

torch's iterator base (``_BaseDataLoaderIter``, which every chute iterator is) decides whether to pin, from
``pin_memory`` and the current accelerator. A batch is then copied into torch's caching host allocator with
torch's own ``pin_memory()``, so torch records an event on every stream that copies out of it and reuses the
block only after those copies; the buffer the path made the batch in (an arena slot, a ring buffer, fresh
gather buffers) is released as the copy is made.

Where the copy runs:

* With worker processes (the generic path) and on the native fast paths, on a pin thread of the iterator's
  own, one batch ahead (:class:`PinAhead`): while the training step runs on batch k, the iterating thread has
  already taken batch k+1 from the path and the pin thread copies it (``pin_memory()`` releases the GIL). The
  iterating thread only waits for a copy that is not done yet. torch's DataLoader pins on a thread of its
  own for its worker processes; a 256-image float32 batch is 154 MB to copy, which in line would sit in
  series with every training step.
* With ``num_workers=0`` on the generic path, on the iterating thread, in line, as torch's in-process
  iterator does: there the dataset's own code runs on that thread too, batch by batch, and reading ahead
  would run it before the training step it may depend on.

The iterating thread keeps every piece of the path's bookkeeping (sampler, tasks, worker liveness, errors):
the pin thread only copies. A batch's error is raised in its place, after the batches before it, and the
next call goes on with the following batch, as before.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch.utils.data import _utils

AHEAD = "on a pin thread, one batch ahead of the iterating thread"
IN_LINE = "on the iterating thread (torch's in-process iterator)"


def describe(device: str | None, where: str) -> str:
    """``stats()["pinning"]``: how batches are pinned, for which accelerator (``device`` None: not pinned)."""
    return (
        f"copied per batch into torch's pinned host memory (pin_memory()) {where}, for {device}" if device else "none"
    )


def _start_pin_thread(device_index: int | None) -> None:
    if device_index is not None:  # as torch's pin thread: pin for the device current where iteration began
        torch.cuda.set_device(device_index)


class _Raise:
    """What the batch ahead turned out to be: an exception (its error, or the end of the epoch)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class PinAhead:
    """Pins each batch on a thread of its own, one batch ahead of the consumer.

    ``next(fetch)`` returns the pinned batch k and, before returning, takes batch k+1 with ``fetch()`` (on the
    calling thread: the path's bookkeeping stays there) and hands it to the pin thread. ``fetch`` raises
    ``StopIteration`` at the end of the epoch and a batch's own error in its place; either is raised at the
    call that would have returned that batch. Not thread-safe: the iterator's thread calls it."""

    def __init__(self, device: str):
        self._device = device
        index = torch.cuda.current_device() if device == "cuda" and torch.cuda.is_available() else None
        self._pool = ThreadPoolExecutor(1, "chute-pin", initializer=_start_pin_thread, initargs=(index,))
        self._ahead: Future | _Raise | None = None

    def next(self, fetch):
        if self._ahead is None:  # the epoch's first batch, or the one after an error
            self._ahead = self._take(fetch)
        ahead, self._ahead = self._ahead, None
        if isinstance(ahead, _Raise):
            error = ahead.error
            del ahead
            raise error
        batch = ahead.result()  # the pinned copy; an error pinning it is raised here, in its place
        del ahead
        self._ahead = self._take(fetch)
        return batch

    def _take(self, fetch) -> Future | _Raise:
        try:
            batch = fetch()
        except (StopIteration, Exception) as e:
            return _Raise(e)
        return self._pool.submit(_utils.pin_memory.pin_memory, batch, self._device)

    def reset(self) -> None:
        """Drops the batch taken ahead (a new epoch on persistent workers, after an early ``break``)."""
        self._ahead = None

    def close(self) -> None:
        self._ahead = None
        self._pool.shutdown(wait=False, cancel_futures=True)
