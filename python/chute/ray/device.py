"""Device delivery of RemoteLoader batches: the object-store buffer is the source of the async copy.

A remote batch arrives on the trainer as numpy arrays over Ray's object store, a shared-memory mapping
of the node's plasma file. ``RemoteDelivery`` hands them to chute's DeviceSlots (cpp/include/chute/gpu/
device_slots.h), the device side of chute.Loader's ``device=`` path: device_prefetch + 1 device buffers,
``cudaMemcpyAsync`` on chute's stream, an event the consumer's stream waits on, the batch's arrays (and
with them the object) held until their copy has completed. The object store is registered with the
device (``cudaHostRegister``) in windows of ``_WINDOW`` bytes, each once, as the batches reach it: the
copy then reads the shared memory itself, without a host copy and without pinning per batch. A batch that
is not in the object store (Ray inlines results under 100 KiB into the trainer's own memory), or a store
the device refuses to register, goes through a pinned staging buffer instead. uint8 crosses to the
device; the dtype and ``Normalize`` are applied there (chute.delivery.DeviceConversion).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from chute import _native
from chute import delivery as _delivery

_WINDOW = 64 << 20  # bytes of the object store registered at a time


def mapping_of(address: int) -> tuple[int, int, bool] | None:
    """The [start, end) of this process's mapping holding ``address``, and whether it is a shared file
    mapping (Ray's plasma store: /dev/shm/plasma...); None when no mapping holds it."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return lo, hi, "s" in fields[1] and len(fields) == 6 and fields[5].strip() != ""
    return None


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
        self._private: list[tuple[int, int]] = []  # private mappings seen: not looked up again
        self._refused: set[int] = set()  # mappings the device would not register: staged
        self.registered_bytes = 0

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
        if any(lo <= address < hi for lo, hi in self._private):
            return  # staged by the native side
        mapping = mapping_of(address)
        if mapping is None or not mapping[2]:
            self._private.append(mapping[:2] if mapping else (address, address + nbytes))
            return
        start, end, _ = mapping
        if start in self._refused:
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
                self._refused.add(start)
                warnings.warn(
                    f"chute.ray: {self.device.name} would not register Ray's object store for direct copies "
                    f"({e}); batches go through a pinned staging buffer instead",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return
