"""Shared-memory batch arena for the generic multi-process DataLoader path.

One iterator owns a fixed pool of *slots*. A slot is one anonymous memfd, created once, shared with every worker
(inherited through fork, or passed as a file descriptor to spawn/forkserver children) and mapped once per process.
A slot's file only grows, so every mapping stays valid.

Life of a slot::

    free --(parent sends a task with it)--> filling --(worker writes the collated tensors, replies)-->
    in flight --(parent rebuilds the batch as zero-copy views)--> leased --(last view dies)--> free

A leased slot returns to the free list only when every storage the parent built on it has been freed (a weakref
callback on the memoryview each storage holds), so a slot is never overwritten while a user tensor still views it.
When every slot is leased (the user keeps batches), tasks go out without a slot and the worker falls back to
torch's own shared-memory tensors for that batch: no deadlock, no overwrite.

Slots are never page-locked. With ``pin_memory=True`` the iterator copies each batch into torch's caching host
allocator (``pin_memory()``, as torch's pin thread does), so the user's non_blocking copies come from torch's
blocks, which torch reuses only after every stream that copied from them is past the copy. A registered slot
could not have that guarantee: chute cannot see which stream a user's copy runs on, so an event recorded at a
view's death on the current stream missed copies on side streams, and ``close()`` unregistered slots that a
copy could still be reading.

Descriptors: a slot is one file in every process, and Python's mmap holds a duplicate of it while mapped.
Mappings are kept for speed; out of descriptors, the idle ones (the parent's slots no batch views, a worker's
other slots) are closed and the mapping is tried once more, so a tight ``ulimit -n`` costs remaps, not an error.

Thread safety: ``acquire`` runs on the iterator's thread; ``_on_view_dead`` may run on any thread that drops the last
reference to a batch tensor (or in the garbage collector). It only uses atomic deque / dict operations.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import pickle
import weakref
from collections import deque
from multiprocessing import reduction

import torch

_ALIGN = 64  # every storage starts on a cache line, so any dtype's element offset is a whole number
_PAGE = mmap.PAGESIZE
_MIN_SLOT = 1 << 20
# Largest slot a worker grows to; a batch that needs more sends its overflow tensors through torch's sharing.
MAX_SLOT_BYTES = 1 << 31
# A tensor viewing less than half of a storage larger than this travels alone, not with its whole storage.
_SMALL_VIEW = 1 << 16


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def supported() -> bool:
    return hasattr(os, "memfd_create")


def out_of_descriptors(e: BaseException) -> bool:
    """EMFILE / ENFILE, or an error whose text says so (torch's shared-memory errors are RuntimeErrors)."""
    return getattr(e, "errno", None) in (errno.EMFILE, errno.ENFILE) or "Too many open files" in str(e)


def near_descriptor_limit(margin: int = 10) -> bool:
    """Whether fewer than ``margin`` descriptors are left: after a failed receive of torch's shared tensors,
    whose error ("received 0 items of ancdata") does not say why, as torch's own iterator checks."""
    held = []
    try:
        for _ in range(margin):
            held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        return False
    except OSError as e:
        return out_of_descriptors(e)
    finally:
        for fd in held:
            os.close(fd)


def _map(fd: int, size: int, give_back) -> mmap.mmap:
    """``mmap.mmap(fd, size)``. Python's mmap holds a duplicate of ``fd`` for as long as it lives, so each
    mapping kept for speed costs a descriptor: out of descriptors, ``give_back()`` closes the idle ones
    (returning how many) and the mapping is tried once more."""
    try:
        return mmap.mmap(fd, size)
    except OSError as e:
        if not out_of_descriptors(e) or not give_back():
            raise
    return mmap.mmap(fd, size)


class SlotFd:
    """A slot's file descriptor that survives pickling into a spawn / forkserver child."""

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _rebuild_slot_fd, (reduction.DupFd(self.fd),)


def _rebuild_slot_fd(dup) -> SlotFd:
    return SlotFd(dup.detach())


# ----------------------------------------------------------------------------------------------------------
# Worker side


class SlotWriter:
    """Worker side: fills the slot the parent assigned to the current task."""

    def __init__(self, fds: list[SlotFd]):
        self._fds = [f.fd for f in fds]
        self._maps: dict[int, tuple[mmap.mmap, int, ctypes.c_char]] = {}
        self._sizes = [0] * len(self._fds)
        self.slot: int | None = None
        self._used = 0
        self._regions: dict[int, tuple[int, int]] = {}  # storage data_ptr -> (offset, nbytes)

    def begin(self, slot: int | None) -> None:
        self.slot = slot
        self._used = 0
        self._regions = {}

    def file_size(self) -> int:
        return self._sizes[self.slot] if self.slot is not None else 0

    def _map(self, slot: int, size: int) -> None:
        old = self._maps.pop(slot, None)
        if old is not None:
            mm = old[0]
            del old  # drops the address anchor (a buffer export) so the mapping can close
            try:
                mm.close()
            except BufferError:
                pass  # collated tensors of this task still view it; unmapped when they die
        mm = _map(self._fds[slot], size, self._close_other_maps)
        anchor = ctypes.c_char.from_buffer(mm)
        self._maps[slot] = (mm, ctypes.addressof(anchor), anchor)

    def _close_other_maps(self) -> int:
        """Closes the mappings of every slot but the current one (remapped when next assigned); how many."""
        closed = 0
        for slot in [s for s in self._maps if s != self.slot]:
            try:
                self._maps.pop(slot)[0].close()
                closed += 1
            except BufferError:
                pass  # collated tensors of an earlier task still view it: it closes when they die
        return closed

    def _alloc(self, nbytes: int) -> int | None:
        """Byte offset of a fresh region in the current slot, growing the slot's file if needed."""
        if self.slot is None:
            return None
        off = _round_up(self._used, _ALIGN)
        end = off + nbytes
        slot = self.slot
        if end > self._sizes[slot] or slot not in self._maps:
            if end > MAX_SLOT_BYTES:
                return None
            size = max(self._sizes[slot], os.fstat(self._fds[slot]).st_size)
            if end > size:
                size = min(MAX_SLOT_BYTES, _round_up(max(end, 2 * size, _MIN_SLOT), _PAGE))
                os.ftruncate(self._fds[slot], size)
            self._sizes[slot] = size
            self._map(slot, size)
        self._used = end
        return off

    def alloc_tensor(self, shape, dtype: torch.dtype) -> torch.Tensor | None:
        """A contiguous tensor living in the current slot (collate stacks straight into it), or None."""
        nbytes = dtype.itemsize
        for s in shape:
            nbytes *= s
        if nbytes == 0:
            return None
        off = self._alloc(nbytes)
        if off is None:
            return None
        mm = self._maps[self.slot][0]
        t = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=off).view(dtype).view(shape)
        self._regions[t.untyped_storage().data_ptr()] = (off, nbytes)
        return t

    def put(self, t: torch.Tensor):
        """Persistent id of a tensor whose storage now lives in the slot, or None (torch's sharing is used)."""
        st = t.untyped_storage()
        nbytes = st.nbytes()
        ptr = st.data_ptr()
        region = self._regions.get(ptr)
        if region is None or region[1] != nbytes:
            if nbytes == 0:
                return ("empty", t.dtype, tuple(t.shape), t.stride(), t.requires_grad)
            used = t.numel() * t.element_size()
            if nbytes > max(2 * used, _SMALL_VIEW):
                return self._put_compact(t, used)  # a small view of a big storage (a dataset row, say)
            off = self._alloc(nbytes)
            if off is None:
                return None
            ctypes.memmove(self._maps[self.slot][1] + off, ptr, nbytes)
            region = self._regions[ptr] = (off, nbytes)
        return ("slot", region[0], region[1], t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad)

    def _put_compact(self, t: torch.Tensor, nbytes: int):
        """Only the tensor's own elements, contiguous (its storage is much larger than the tensor)."""
        off = self._alloc(nbytes)
        if off is None:
            return None
        mm = self._maps[self.slot][0]
        dst = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=off).view(t.dtype).view(t.shape)
        dst.copy_(t.detach())
        del dst
        return ("slot", off, nbytes, t.dtype, tuple(t.shape), _contiguous_strides(t.shape), 0, t.requires_grad)


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


class _BatchPickler(reduction.ForkingPickler):
    """ForkingPickler (so torch's tensor reductions still apply) that sends plain CPU tensors through the slot."""

    def __init__(self, file, writer: SlotWriter):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self._writer = writer

    def persistent_id(self, obj):
        if (
            type(obj) is torch.Tensor
            and obj.layout == torch.strided
            and obj.device.type == "cpu"
            and not obj.is_nested
            and not obj.is_quantized
            and not obj.is_conj()
            and not obj.is_neg()
            and obj.grad_fn is None
        ):
            return self._writer.put(obj)
        return None


def dumps_batch(data, writer: SlotWriter) -> bytes:
    import io

    buf = io.BytesIO()
    _BatchPickler(buf, writer).dump(data)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------------------
# Parent side


class _Lease:
    """The parent's claim on one slot: freed when the last storage built on the slot is freed."""

    __slots__ = ("slot", "refs", "dead", "__weakref__")

    def __init__(self, slot: int):
        self.slot = slot
        self.refs: list[weakref.ref] = []
        self.dead = deque()


class Arena:
    """Parent side: owns the slots' files and mappings, the free list and the leases."""

    def __init__(self, num_slots: int):
        if not supported():
            raise RuntimeError("chute's batch arena needs os.memfd_create (Linux)")
        self.num_slots = num_slots
        self._fds: list[int] = []
        try:
            for i in range(num_slots):
                self._fds.append(os.memfd_create(f"chute-dataloader-slot-{i}", os.MFD_CLOEXEC))
        except BaseException:
            _close_all(self._fds)  # out of descriptors part-way: the files made so far are not leaked
            raise
        self._maps: list[tuple[mmap.mmap, int] | None] = [None] * num_slots
        self._free: deque[int] = deque(range(num_slots))
        self._leases: dict[int, _Lease] = {}
        self._closed = False
        # The files close with the arena even if close() is never called (an iterator that failed to start).
        self._close_fds = weakref.finalize(self, _close_all, self._fds)

    def handles(self) -> list[SlotFd]:
        return [SlotFd(fd) for fd in self._fds]

    # -- slot accounting --------------------------------------------------------------------------------
    def acquire(self) -> int | None:
        try:
            return self._free.popleft()
        except IndexError:
            return None

    def release(self, slot: int) -> None:
        """Back to the free list without a lease (the task's reply carried no batch)."""
        self._free.append(slot)

    def free_slots(self) -> int:
        return len(self._free)

    def _on_view_dead(self, lease: _Lease, _ref) -> None:
        lease.dead.append(None)
        if len(lease.dead) < len(lease.refs):
            return
        if self._leases.pop(lease.slot, None) is not lease:
            return  # another thread's callback got here first
        lease.refs.clear()
        if self._closed:
            self._unmap(lease.slot)
            return
        self._free.append(lease.slot)

    # -- mappings ---------------------------------------------------------------------------------------
    def _mapping(self, slot: int, size: int) -> mmap.mmap:
        cur = self._maps[slot]
        if cur is not None and cur[1] >= size:
            return cur[0]
        self._unmap(slot)  # a free slot: nothing views the old mapping
        mm = _map(self._fds[slot], size, self._unmap_idle)
        self._maps[slot] = (mm, size)
        return mm

    def _unmap_idle(self) -> int:
        """Unmaps the slots no batch views (free, or in a worker's hands: remapped when their batch comes
        back); how many mappings that closed. Only this thread makes leases, so none appears meanwhile."""
        return sum(self._unmap(slot) for slot in range(self.num_slots) if slot not in self._leases)

    def _unmap(self, slot: int) -> bool:
        """Whether a mapping was closed now (one still viewed goes when its last view does)."""
        cur = self._maps[slot]
        if cur is None:
            return False
        self._maps[slot] = None
        try:
            cur[0].close()
            return True
        except BufferError:
            return False

    # -- rebuilding a batch -----------------------------------------------------------------------------
    def loads(self, slot: int | None, file_size: int, data: bytes):
        """Unpickle a worker's batch; tensors in the slot become zero-copy views that lease the slot."""
        if slot is None:
            return pickle.loads(data)
        try:
            mm = self._mapping(slot, file_size) if file_size else None
        except BaseException:
            self._free.append(slot)  # nothing views it: the slot stays usable for the next task
            raise
        lease = _Lease(slot)
        obj = _BatchUnpickler(data, self, mm, lease).load()
        if lease.refs:
            self._leases[slot] = lease
            if len(lease.dead) >= len(lease.refs):  # every view died during unpickling
                lease.dead.pop()
                self._on_view_dead(lease, None)
        else:
            self._free.append(slot)
        return obj

    def close(self) -> None:
        """Close the files; mappings that user tensors still view stay until those tensors die."""
        if self._closed:
            return
        self._closed = True
        for slot in range(self.num_slots):
            if slot not in self._leases:
                self._unmap(slot)
        self._close_fds()
        self._free.clear()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


class _BatchUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, arena: Arena, mm, lease: _Lease):
        import io

        super().__init__(io.BytesIO(data))
        self._arena = arena
        self._mm = mm
        self._lease = lease
        self._storages: dict[int, torch.UntypedStorage] = {}

    def persistent_load(self, pid):
        if pid[0] == "empty":
            _, dtype, size, stride, requires_grad = pid
            return torch.empty_strided(size, stride, dtype=dtype).requires_grad_(requires_grad)
        _, off, nbytes, dtype, size, stride, storage_offset, requires_grad = pid
        st = self._storages.get(off)
        if st is None:
            view = memoryview(self._mm)[off : off + nbytes]
            st = torch.frombuffer(view, dtype=torch.uint8).untyped_storage()
            lease = self._lease
            lease.refs.append(weakref.ref(view, lambda r, a=self._arena, held=lease: a._on_view_dead(held, r)))
            del view
            self._storages[off] = st
        t = torch.empty((0,), dtype=dtype).set_(st, storage_offset, size, stride)
        return t.requires_grad_(requires_grad) if requires_grad else t
