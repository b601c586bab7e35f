"""Page-locking the arena's slots for pin_memory=True, without a pinning thread.

torch's DataLoader pins each batch on a Python thread (a copy into freshly pinned memory, under the GIL). chute
registers each slot's mapping with CUDA once (``cudaHostRegister``), when the slot is first mapped or grows, so
a batch is pinned the moment a worker writes it: ``tensor.is_pinned()`` is True and ``.to("cuda",
non_blocking=True)`` is a true async DMA. When a pinned slot's last view dies, a CUDA event is recorded on the
current stream, and the slot is reused only once that event has completed (a non_blocking copy may still read it).
Without CUDA, pin_memory=True behaves as in torch: a warning, and no pinning.
"""

from __future__ import annotations

import ctypes
import mmap

import torch

_registered: dict[int, int] = {}  # id(mapping) -> address


def _address(mm: mmap.mmap) -> int:
    anchor = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def register(mm: mmap.mmap, size: int) -> None:
    addr = _address(mm)
    err = torch.cuda.cudart().cudaHostRegister(addr, size, 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister of a {size}-byte DataLoader arena slot failed (cudaError {int(err)})")
    _registered[id(mm)] = addr


def unregister(mm: mmap.mmap) -> None:
    addr = _registered.pop(id(mm), None)
    if addr is not None:
        torch.cuda.cudart().cudaHostUnregister(addr)
