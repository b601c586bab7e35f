"""chute.ray's device delivery on the simulated device, without a cluster: which memory of Ray's object store
is registered with the device (the primary store, whose end chute sees; never a fallback allocation), and that
no registration outlives its memory: ray.shutdown() unregisters first, and a window unmapped and remapped behind
chute's back is never copied from (docs/GPU.md, "Registered memory")."""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

from chute.ray.device import RemoteDelivery  # noqa: E402

SAMPLE = (8, 8, 3)
BATCH = 4
SIZE = 1 << 20
LABELS_AT = 4096

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FIXED = 0x10


class Mapped:
    """A file mapped shared, as Ray maps its plasma files; ``remap`` maps another file at the same address."""

    def __init__(self, path):
        self.address = _libc.mmap(None, SIZE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, self._file(path), 0)
        assert self.address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())

    @staticmethod
    def _file(path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, SIZE)
        return fd  # held by the mapping's test (closed with the process)

    def remap(self, path) -> None:
        flags = mmap.MAP_SHARED | MAP_FIXED
        got = _libc.mmap(self.address, SIZE, mmap.PROT_READ | mmap.PROT_WRITE, flags, self._file(path), 0)
        assert got == self.address

    def unmap(self) -> None:
        assert _libc.munmap(self.address, SIZE) == 0

    def batch(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``n`` written into the mapping, as arrays over it (what ray.get returns)."""
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * SIZE).from_address(self.address))
        images = raw[: BATCH * int(np.prod(SAMPLE))].reshape(BATCH, *SAMPLE)
        labels = raw[LABELS_AT : LABELS_AT + 8 * BATCH].view(np.int64)
        images[...] = expected(n)[0]
        labels[...] = expected(n)[1]
        return images, labels


def expected(n: int) -> tuple[np.ndarray, np.ndarray]:
    images = (np.arange(BATCH * int(np.prod(SAMPLE)), dtype=np.int64) * 7 + n * 131) % 251
    return images.astype(np.uint8).reshape(BATCH, *SAMPLE), np.arange(BATCH, dtype=np.int64) + 100 * n


def delivery() -> RemoteDelivery:
    return RemoteDelivery("sim", torch.uint8, None, False, BATCH, seed=1, device_prefetch=2, max_device_memory=1 << 30)


def deliver(d: RemoteDelivery, images, labels, n: int) -> None:
    d.issue(images, labels)
    x, y = d.next()
    assert np.array_equal(x.numpy(), expected(n)[0]) and np.array_equal(y.numpy(), expected(n)[1])


def test_a_fallback_allocation_is_staged_never_registered(tmp_path):
    # Ray puts objects the full store cannot take in files of the session directory and unmaps them when they
    # are released, unseen by chute: such memory is copied through the pinned staging buffer.
    store = Mapped(tmp_path / "session_2026-01-01_00-00-00_1" / "plasmaAbC123")
    d = delivery()
    for n in range(3):
        deliver(d, *store.batch(n), n)
    assert d.registered_bytes == 0
    d.close()
    store.unmap()
    assert d.device.violations == 0, d.device.first_violation


def test_a_window_unmapped_and_remapped_is_never_copied_from(tmp_path):
    store = Mapped(tmp_path / "plasmaPrimary")
    d = delivery()
    deliver(d, *store.batch(0), 0)
    assert d.registered_bytes > 0 and d.slots.registered(store.address, SIZE)  # the primary store: registered
    # The store's memory goes and other memory is mapped at the same address (a store made again after
    # ray.shutdown() and ray.init(), or memory Ray unmapped without a word).
    store.remap(tmp_path / "plasmaOther")
    with pytest.warns(RuntimeWarning, match="unmapped or replaced before chute could unregister it"):
        deliver(d, *store.batch(1), 1)
    assert d.device.violations == 0, d.device.first_violation  # no copy from the pages pinned before
    assert d.stale_ranges == 1
    deliver(d, *store.batch(2), 2)  # the new memory is registered in its turn
    assert d.slots.registered(store.address, SIZE)
    d.close()
    store.unmap()
    assert d.device.violations == 0, d.device.first_violation
    assert d.device.outlived_registrations == 1  # the one unmapped behind chute's back


def test_ray_shutdown_unregisters_the_store_before_ray_unmaps_it(tmp_path):
    import ray

    store = Mapped(tmp_path / "plasmaPrimary")
    d = delivery()
    deliver(d, *store.batch(0), 0)
    assert d.slots.registered(store.address, SIZE)
    ray.shutdown()  # no cluster here: Ray's own shutdown does nothing, chute's unregistering runs first
    assert not d.slots.registered(store.address, SIZE)
    store.unmap()
    assert d.device.outlived_registrations == 0 and d.device.violations == 0, d.device.first_violation
    d.close()
