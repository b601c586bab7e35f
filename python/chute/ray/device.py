"""Device delivery of RemoteLoader batches: the object-store buffer is the source of the async copy.

A remote batch arrives on the trainer as numpy arrays over Ray's object store, a shared-memory mapping
of the node's plasma file. ``RemoteDelivery`` hands them to chute's DeviceSlots (cpp/include/chute/gpu/
device_slots.h), the device side of chute.Loader's ``device=`` path: device_prefetch + 1 device buffers,
``cudaMemcpyAsync`` on chute's stream, an event the consumer's stream waits on, the batch's arrays (and
with them the object) held until their copy has completed. uint8 crosses to the device; the dtype and
``Normalize`` are applied there (chute.delivery.DeviceConversion).

Registered memory (docs/GPU.md, "Registered memory"). Ray's store is registered with the device
(``cudaHostRegister``) in windows of ``_WINDOW`` bytes, each once, as the batches reach it: the copy then
reads the shared memory itself, without a host copy and without pinning per batch. A registration pins
the pages mapped at that moment, so it must end before its memory is unmapped. chute registers only
memory whose end it sees: Ray's primary store, which lives until ``ray.shutdown()`` or the process's
exit, both of which first unregister every window (:func:`_watch_ray_shutdown`). A fallback allocation
(an object Ray placed in a file of the session directory because the store was full) is unmapped as soon
as its object is released, unseen: its batches go through a pinned staging buffer, as do batches Ray
inlined into the trainer's own memory (under 100 KiB) and any store the device refuses to register.
Before each copy from a registered window, DeviceSlots checks that the mapping there is still the one
registered; a window found unmapped or replaced is unregistered and warned about, and its batches staged.

While a window is registered, it is pinned memory for every CUDA call in the process: another
``torch.from_numpy(array).cuda(non_blocking=True)`` of an array in the store is then truly asynchronous,
and nothing holds the object until that copy has read it (torch records no event for memory it did not
allocate). Keep such an array alive until the copy is done (``torch.cuda.current_stream().synchronize()``),
or copy it without ``non_blocking``.
"""

from __future__ import annotations

import functools
import warnings
import weakref

import numpy as np
import torch

from chute import _native
from chute import delivery as _delivery

_WINDOW = 64 << 20  # bytes of the object store registered at a time


def _fallback_allocation(path: str) -> bool:
    """Whether a mapped file is one of Ray's fallback allocations: a ``plasma*`` file in the session
    directory (``.../session_<date>/``), where Ray puts objects the full store cannot take and unmaps them
    when they are released. The primary store is a ``plasma*`` file in the plasma directory (/dev/shm)."""
    parts = path.removesuffix(" (deleted)").split("/")
    return any(p.startswith("session_") for p in parts[:-1])


def _primary_store(mapping) -> bool:
    """A mapping whose end chute sees (module docstring): Ray's primary object store."""
    _start, _end, shared, file_backed, path = mapping
    name = path.removesuffix(" (deleted)").rsplit("/", 1)[-1]
    return shared and file_backed and name.startswith("plasma") and not _fallback_allocation(path)


# Every RemoteDelivery with registered windows: ray.shutdown() and the process's exit unregister them first.
_LIVE: weakref.WeakSet = weakref.WeakSet()
_WATCHING = False


def _unregister_every_store() -> None:
    for delivery in list(_LIVE):
        delivery.unregister_store()


def _watch_ray_shutdown() -> None:
    """Ray unmaps its object store in ``ray.shutdown()``, and at the process's exit (an ``atexit`` hook of
    its own, registered when ray is imported). Every registration must end before: ``ray.shutdown`` is
    wrapped to unregister first, and an ``atexit`` hook registered after Ray's runs before it."""
    global _WATCHING
    if _WATCHING:
        return
    import atexit

    import ray
    from ray._private import worker

    original = worker.shutdown

    @functools.wraps(original)
    def shutdown(*args, **kwargs):
        _unregister_every_store()
        return original(*args, **kwargs)

    ray.shutdown = worker.shutdown = shutdown
    atexit.register(_unregister_every_store)
    _WATCHING = True


class RemoteDelivery:
    """Remote batches (numpy arrays, uint8) to ``device`` through DeviceSlots; one consumer thread."""

    def __init__(self, device, dtype: torch.dtype, normalize, channels_last: bool, batch_size: int, seed: int,
                 device_prefetch: int, max_device_memory: int):  # fmt: skip
        self.kind, index = _delivery.parse_device(device)
        self.torch_device = torch.device("cuda", index) if self.kind == "cuda" else torch.device("cpu")
        self.device = _delivery.open_device(self.kind, index, seed)
        self.options = _native.DeliveryOptions(device_prefetch=device_prefetch, max_device_memory=max_device_memory)
        self.convert = _delivery.DeviceConversion(dtype, normalize, self.torch_device)
        self.channels_last = channels_last
        self.batch_size = batch_size
        self.slots = None  # made with the first batch, which gives the sample size
        self.sample_shape: tuple[int, ...] = ()
        self._refused: set[tuple[int, str]] = set()  # mappings the device would not register: staged
        self.registered_bytes = 0
        self._stale_warned = 0

    @property
    def prefetch(self) -> int:
        return self.options.device_prefetch if self.slots is None else self.slots.device_prefetch

    def can_issue(self) -> bool:
        return self.slots is None or self.slots.can_issue

    def waiting(self) -> int:
        return 0 if self.slots is None else self.slots.waiting

    def issue(self, images: np.ndarray, labels: np.ndarray) -> None:
        """Starts the copy of a batch (its arrays are held until the copy completed)."""
        if images.dtype != np.uint8:
            raise AssertionError(f"RemoteDelivery takes uint8 batches, got {images.dtype}")
        count = labels.shape[0]
        if self.slots is None:
            self.sample_shape = images.shape[1:]
            self.slots = _native.DeviceSlots(self.device, images.nbytes // count, self.batch_size, self.options)
        for array in (images, labels):
            self._register(array.ctypes.data, array.nbytes)
        self.slots.issue(images.reshape(-1), labels, (images, labels))
        if self.slots.stale_ranges > self._stale_warned:
            self._stale_warned = self.slots.stale_ranges
            warnings.warn(
                "chute.ray: object-store memory registered with the device was unmapped or replaced before "
                "chute could unregister it; that window was unregistered and its batches are staged",
                RuntimeWarning,
                stacklevel=2,
            )

    @property
    def stale_ranges(self) -> int:
        """Registered windows found unmapped or replaced before they were unregistered."""
        return 0 if self.slots is None else self.slots.stale_ranges

    def unregister_store(self) -> None:
        """Ends every registration, after the copies in flight: before Ray unmaps the store."""
        if self.slots is not None:
            self.slots.unregister_host(0, 2**64 - 1)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The oldest issued batch, on the device, in the requested dtype and memory format."""
        flat, labels = self.slots.next(_delivery.consumer_stream(self.kind, self.torch_device))
        images = flat.view(labels.shape[0], *self.sample_shape)
        del flat
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)  # NHWC memory, NCHW shape: channels_last strides
        # The labels in their own small allocation: a kept label tensor must not hold the device buffer.
        return self.convert(images), labels.clone()

    def drain(self) -> None:
        """Drops the batches copied ahead and not taken (an iteration that was left)."""
        if self.slots is not None:
            self.slots.drain()

    def close(self) -> None:
        if self.slots is not None:
            self.slots.close()  # waits for the copies in flight, unregisters the store

    def _register(self, address: int, nbytes: int) -> None:
        if nbytes == 0 or self.slots.registered(address, nbytes):
            return
        mapping = _native.mapping_of(address)
        if mapping is None or not _primary_store(mapping):
            return  # staged by the native side (module docstring)
        start, end, _, _, path = mapping
        if (start, path) in self._refused:
            return
        first = (address - start) // _WINDOW
        last = (address + nbytes - 1 - start) // _WINDOW
        for k in range(first, last + 1):
            lo, hi = start + k * _WINDOW, min(end, start + (k + 1) * _WINDOW)
            if self.slots.registered(lo, hi - lo):
                continue
            try:
                self.slots.register_host(lo, hi - lo)
                self.registered_bytes += hi - lo
            except (RuntimeError, ValueError) as e:
                self._refused.add((start, path))
                warnings.warn(
                    f"chute.ray: {self.device.name} would not register Ray's object store for direct copies "
                    f"({e}); batches go through a pinned staging buffer instead",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return
            _watch_ray_shutdown()
            _LIVE.add(self)
