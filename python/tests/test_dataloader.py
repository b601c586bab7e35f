"""chute.DataLoader's own behaviour: the shared-memory arena, slot lifetimes, shutdown, stats and the fast-path seam.

torch parity lives in test_dataloader_torch.py.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

import chute
from chute import DataLoader
from chute.dataloader import arena, pinning
from chute.dataloader import plan as seam


class Arange(Dataset):
    """Sample i is a small float tensor full of i, plus the int i and a string."""

    def __init__(self, n=64, shape=(3, 4)):
        self.n = n
        self.shape = shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": torch.full(self.shape, float(i)), "i": i, "name": f"s{i}"}


def _fds() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return out


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _our_pids() -> set[int]:
    """This process and its children (the DataLoader's workers)."""
    pids = {os.getpid()}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return pids


def _shm_files() -> int:
    """/dev/shm entries this process and its workers made (torch names them torch_<pid>_...; others' entries,
    from tests running beside this one, do not count)."""
    if not os.path.isdir("/dev/shm"):
        return 0
    pids = _our_pids()
    return sum(
        1
        for name in os.listdir("/dev/shm")
        if name.startswith("torch_") and name.split("_")[1].isdigit() and int(name.split("_")[1]) in pids
    )


def _check(batch, first):
    n = len(batch["i"])
    assert batch["i"].tolist() == list(range(first, first + n))
    assert batch["name"] == [f"s{k}" for k in range(first, first + n)]
    assert torch.equal(batch["x"], torch.arange(first, first + n, dtype=torch.float32)[:, None, None].expand(n, 3, 4))


# ---------------------------------------------------------------------------------------------- arena


def test_batches_arrive_through_the_arena_and_slots_are_reused():
    gc.collect()  # earlier tests' garbage (and its fds) goes now, not in the middle of the count
    loader = DataLoader(Arange(400), batch_size=4, num_workers=2)
    it = iter(loader)
    for k in range(8):  # warm-up: workers started, every slot mapped once (Python's mmap holds a dup of the fd)
        _check(next(it), 4 * k)
    fds, shm = _fd_count(), _shm_files()
    for k in range(8, 100):
        _check(next(it), 4 * k)
        # Constant file descriptors and /dev/shm entries, batch after batch (torch: one shm file + fd per tensor).
        assert _fd_count() == fds
        assert _shm_files() == shm
    stats = loader.stats()
    assert stats["batches"] == 100
    assert stats["arena_batches"] == 100 and stats["shared_batches"] == 0
    assert it._arena.num_slots == stats["arena_slots"] == 2 * 2 + 2
    del it


def test_memfd_slots_are_named_and_closed_with_the_iterator():
    def slot_fds():
        return [f for f in _fds() if "chute-dataloader-slot" in f]

    gc.collect()
    before = len(slot_fds())
    it = iter(DataLoader(Arange(40), batch_size=4, num_workers=2))
    next(it)
    assert len(slot_fds()) - before >= 2 * 2 + 2  # one memfd per slot (plus a dup per mapped slot)
    del it
    gc.collect()
    assert len(slot_fds()) == before


def test_a_held_batch_is_never_overwritten():
    loader = DataLoader(Arange(400), batch_size=4, num_workers=2)
    it = iter(loader)
    held = next(it)
    view = held["x"][1:3]  # a view keeps the slot leased too
    x_id = held["x"].data_ptr()
    del held
    for k in range(1, 60):
        _check(next(it), 4 * k)
    assert view.data_ptr() == x_id + 3 * 4 * 4  # still the zero-copy view of the first batch's slot
    assert torch.equal(view, torch.tensor([1.0, 2.0])[:, None, None].expand(2, 3, 4))
    assert loader.stats()["arena_batches"] == 60


def test_keeping_every_batch_falls_back_without_deadlock_or_overwrite():
    loader = DataLoader(Arange(200), batch_size=4, num_workers=2)
    batches = list(loader)  # the user keeps them all: the slots run out
    for k, b in enumerate(batches):
        _check(b, 4 * k)
    stats = loader.stats()
    assert stats["arena_batches"] == stats["arena_slots"]  # every slot used once, then held
    assert stats["shared_batches"] == len(batches) - stats["arena_slots"]


def test_slot_returns_when_the_last_view_dies():
    it = iter(DataLoader(Arange(400), batch_size=4, num_workers=1, prefetch_factor=1))
    free0 = None
    batches = []
    for _ in range(3):
        batches.append(next(it))
        time.sleep(0.05)
    free_held = it._arena.free_slots()
    batches.clear()
    free0 = it._arena.free_slots()
    assert free0 > free_held  # the dropped batches' slots are free again
    del it


def test_each_tensor_keeps_its_own_storage():
    # A batch tensor's storage is only its own bytes (torch.save of the labels does not carry the images).
    batch = next(iter(DataLoader(Arange(16, shape=(64, 64)), batch_size=8, num_workers=1)))
    x, i = batch["x"], batch["i"]
    assert x.untyped_storage().nbytes() == x.numel() * 4
    assert i.untyped_storage().nbytes() == i.numel() * 8
    assert x.is_contiguous() and x.shape == (8, 64, 64)


class Aliasing(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i


def _aliasing_collate(batch):
    base = torch.arange(10.0) + batch[0]
    return {
        "base": base,
        "view": base[2:6],
        "strided": base[::3],
        "empty": torch.empty(0, 5),
        "int8": torch.tensor(batch, dtype=torch.int8),
        "bool": torch.tensor(batch) > 2,
        "cplx": torch.tensor([1 + 2j], dtype=torch.complex64),
        "grad": torch.ones(2, requires_grad=True),
        "nt": (1, "two", 3.0, None),
    }


def test_custom_collate_structures_survive_the_arena():
    for b in DataLoader(Aliasing(), batch_size=4, num_workers=1, collate_fn=_aliasing_collate):
        first = float(b["base"][0])
        assert torch.equal(b["base"], torch.arange(10.0) + first)
        assert b["view"].untyped_storage().data_ptr() == b["base"].untyped_storage().data_ptr()  # aliasing kept
        assert torch.equal(b["strided"], (torch.arange(10.0) + first)[::3]) and b["strided"].stride() == (3,)
        b["base"][3] = -1.0
        assert b["view"][1] == -1.0
        assert b["empty"].shape == (0, 5)
        assert b["int8"].dtype == torch.int8 and b["bool"].dtype == torch.bool
        assert b["cplx"].item() == 1 + 2j
        assert b["grad"].requires_grad
        assert b["nt"] == (1, "two", 3.0, None)


def test_tensors_larger_than_a_slot_use_torch_sharing(monkeypatch):
    monkeypatch.setattr(arena, "MAX_SLOT_BYTES", 1 << 16)  # read by the forked workers
    loader = DataLoader(Arange(16, shape=(64, 128)), batch_size=4, num_workers=1)  # 128 KiB per batch
    for k, b in enumerate(loader):
        assert torch.equal(
            b["x"], torch.arange(4 * k, 4 * k + 4, dtype=torch.float32)[:, None, None].expand(4, 64, 128)
        )
        assert b["i"].tolist() == list(range(4 * k, 4 * k + 4))  # small tensors still fit the slot


def test_slots_grow_for_large_batches():
    loader = DataLoader(Arange(12, shape=(3, 256, 256)), batch_size=6, num_workers=1)  # 4.7 MB per batch
    for k, b in enumerate(loader):
        assert float(b["x"][5, 2, 255, 255]) == 6 * k + 5
    assert loader.stats()["arena_batches"] == 2


# ---------------------------------------------------------------------------------------------- processes


def _children() -> set[int]:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        import multiprocessing

        return {p.pid for p in multiprocessing.active_children()}


def _eventually(done, timeout=10.0) -> bool:
    """Whether ``done()`` holds within ``timeout`` seconds (polled): for what other processes and threads end
    on their own time."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _wait_gone(pids, timeout=10.0):
    return _eventually(lambda: not (pids & _children()), timeout)


@pytest.mark.parametrize("how", ["break", "del", "gc_cycle"])
def test_no_leaked_workers_or_fds_after_early_exit(how):
    # One whole epoch first: what the process opens once, on its first worker start, is not a leak.
    list(DataLoader(Arange(8), batch_size=4, num_workers=2))
    gc.collect()
    fds = _fd_count()
    loader = DataLoader(Arange(400), batch_size=4, num_workers=2)
    it = iter(loader)
    pids = {w.pid for w in it._workers}
    assert pids <= _children()
    if how == "break":
        for k, b in enumerate(it):  # noqa: B007 (b: the held batch, deleted below)
            if k == 3:
                break
        del it, b
    elif how == "del":
        next(it)
        del it
    else:
        next(it)
        holder = {"it": it}
        holder["self"] = holder  # a reference cycle only the garbage collector frees
        del it, holder
        gc.collect()
    assert _wait_gone(pids)
    gc.collect()
    # The queues' feeder threads close their pipe ends on their own time: wait for them, don't race them.
    assert _eventually(lambda: _fd_count() <= fds), (_fd_count(), fds)


def test_persistent_workers_survive_epochs_and_early_breaks():
    loader = DataLoader(Arange(40), batch_size=4, num_workers=2, persistent_workers=True)
    for b in loader:  # noqa: B007 (the next loop reassigns b, which frees this last batch's slot)
        pass
    it = loader._iterator
    pids = [w.pid for w in it._workers]
    for _epoch in range(3):
        for k, b in enumerate(loader):
            _check(b, 4 * k)
            if k == 2:
                break  # tasks still in flight: their slots must come back at the next epoch's reset
    del b
    for k, b in enumerate(loader):
        _check(b, 4 * k)
    del b
    assert [w.pid for w in loader._iterator._workers] == pids
    gc.collect()
    assert loader._iterator._arena.free_slots() == loader._iterator._arena.num_slots


def test_worker_killed_raises_instead_of_hanging():
    class Slow(Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            time.sleep(0.02)
            return i

    it = iter(DataLoader(Slow(), batch_size=1, num_workers=2))
    next(it)
    try:
        with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid"):
            os.kill(it._workers[0].pid, 9)
            for _ in range(100):
                next(it)
    finally:
        it._shutdown_workers()


# ---------------------------------------------------------------------------------------------- pin_memory


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs only without a GPU: checks the no-accelerator behaviour")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_pin_memory_without_cuda_warns_like_torch(num_workers):
    with pytest.warns(UserWarning, match="'pin_memory' argument is set as true but no accelerator is found"):
        batch = next(iter(DataLoader(Arange(8), batch_size=4, num_workers=num_workers, pin_memory=True)))
    _check(batch, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pin_memory_batches_are_pinned():
    loader = DataLoader(Arange(64), batch_size=4, num_workers=2, pin_memory=True)
    for k, b in enumerate(loader):
        assert b["x"].is_pinned() and b["i"].is_pinned()
        _check(b, 4 * k)
        assert torch.equal(b["x"].to("cuda", non_blocking=True).cpu(), b["x"])
    assert loader.stats()["arena_batches"] == 16


# ---------------------------------------------------------------------------------------------- stats and the seam


def test_stats_and_log_line(caplog):
    loader = DataLoader(Arange(8), batch_size=4)
    with caplog.at_level(logging.INFO, logger="chute.dataloader"):
        list(loader)
        list(loader)
    records = [r for r in caplog.records if r.name == "chute.dataloader"]
    reason = (
        "test_dataloader.Arange has no native fast path (TensorDataset, chute_columns, torchvision "
        "ImageFolder/DatasetFolder, chute's datasets have)"
    )
    # Once per loader, as a WARNING (issue 18: at INFO nobody saw it), with the reason and what to change.
    assert [r.levelno for r in records] == [logging.WARNING]
    assert reason in records[0].getMessage() and "chute_columns" in records[0].getMessage().split(reason)[1]
    stats = loader.stats()
    assert stats["path"] == "generic" and stats["fallback_reason"] == reason
    assert stats["batches"] == 4


class _ArangePlan(seam.Plan):
    kind = "test"

    def __init__(self, loader):
        self.loader = loader

    def batches(self, index_batches, base_seed=None, epoch=0):
        self.base_seed = base_seed
        for idx in index_batches:
            yield self.loader.collate_fn([self.loader.dataset[i] for i in idx])


def test_a_plan_runs_behind_torchs_seed_and_sampler_protocol(monkeypatch, caplog):
    monkeypatch.setattr(seam, "choose", lambda loader: _ArangePlan(loader))
    dataset = TensorDataset(torch.arange(50))

    def order(cls):
        loader = cls(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
        return [b[0].tolist() for _ in range(3) for b in loader], loader

    with caplog.at_level(logging.INFO, logger="chute.dataloader"):
        ours, loader = order(DataLoader)
    theirs, _ = order(torch.utils.data.DataLoader)
    assert ours == theirs  # same generator draws in the same order as torch: the same shuffles every epoch
    assert loader.stats()["path"] == "fast:test" and loader.stats()["fallback_reason"] is None
    assert len(iter(loader)) == len(loader) == 7
    assert "native fast path 'test'" in caplog.text


def test_exported_from_chute():
    assert chute.DataLoader is DataLoader
    assert chute.get_worker_info() is None


def test_pin_memory_batches_are_torch_pinned_copies_that_hold_no_slot(monkeypatch):
    # A user's non_blocking copy may run on any stream, which chute cannot see: a pinned batch must therefore
    # live in torch's caching host allocator (which records an event on every stream that copies from it), not
    # in a page-locked arena slot that chute reuses. Without a GPU, torch's pin is stood in for by a copy, and
    # any page-locking of a slot (the old design) is caught.
    registered = []

    class NoRegister:
        def cudaHostRegister(self, addr, size, flags):
            registered.append(size)
            return 0

        def cudaHostUnregister(self, addr):
            return 0

    pinned = []

    def fake_pin(data, device=None):
        out = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in data.items()}
        pinned.extend(t.data_ptr() for t in out.values() if isinstance(t, torch.Tensor))
        return out

    monkeypatch.setattr(torch.cuda, "cudart", lambda: NoRegister())
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.utils.data._utils.pin_memory, "pin_memory", fake_pin)
    loader = DataLoader(Arange(32), batch_size=4, num_workers=2, pin_memory=True)
    kept = []
    for k, b in enumerate(loader):
        _check(b, 4 * k)
        kept.append(b)
    assert not registered, "an arena slot was page-locked"
    assert {b["x"].data_ptr() for b in kept} <= set(pinned)  # what the user got is torch's pinned copy
    assert loader.stats()["arena_batches"] == 8


@pytest.mark.parametrize("ctx", ["spawn", "forkserver"])
def test_arena_slots_reach_spawned_workers(ctx):
    # The slots' descriptors travel to spawn / forkserver children (multiprocessing's DupFd), so batches still
    # come through the arena.
    loader = DataLoader(Arange(40, shape=(1,)), batch_size=4, num_workers=2, multiprocessing_context=ctx)
    for k, b in enumerate(loader):
        assert b["x"].flatten().tolist() == [4.0 * k + j for j in range(4)]
    assert loader.stats()["arena_batches"] == 10


def test_a_view_of_a_big_storage_travels_alone():
    # batch_size=None hands the worker dataset[i] as is: a row view of the whole 16 MB tensor. Only the row
    # goes through the slot, not the storage under it.
    data = torch.arange(4096 * 1024, dtype=torch.float32).view(4096, 1024)
    loader = DataLoader(TensorDataset(data), batch_size=None, num_workers=1)
    it = iter(loader)
    for k in range(20):
        (row,) = next(it)
        assert torch.equal(row, data[k]) and row.untyped_storage().nbytes() == 1024 * 4
    assert max(m[1] for m in it._arena._maps if m is not None) <= 1 << 20  # the slot stayed at its minimum size
    del it


def _failing_collate(batch):
    raise ValueError("cannot collate")


class _FailingIterable(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield 1
        raise OSError("disk gone")


@pytest.mark.parametrize("case", ["collate", "iterable"])
def test_worker_errors_say_where_they_happened(case):
    if case == "collate":
        loader = DataLoader(Arange(8), batch_size=2, num_workers=1, collate_fn=_failing_collate)
        exc, where = ValueError, "in DataLoader worker process 0 (while collating batch indices [0, 1])"
    else:
        loader = DataLoader(_FailingIterable(), batch_size=2, num_workers=1)
        exc, where = OSError, "in DataLoader worker process 0 (reading the iterable dataset)"
    it = iter(loader)
    try:
        with pytest.raises(exc) as info:
            next(it)
        assert where in str(info.value)
    finally:
        it._shutdown_workers()


class _BadAt7(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 7:
            raise KeyError(i)
        return i


@pytest.mark.parametrize(
    "batch_size,collate_fn,exc,note",
    [
        (2, None, KeyError, "chute.DataLoader: in-process loading failed (sample index 7)"),
        (None, None, KeyError, "chute.DataLoader: in-process loading failed (sample index 7)"),
        (
            2,
            _failing_collate,
            ValueError,
            "chute.DataLoader: in-process loading failed (while collating batch indices [0, 1])",
        ),
    ],
)
def test_in_process_errors_keep_torchs_exception_and_name_the_sample(batch_size, collate_fn, exc, note):
    with pytest.raises(exc) as info:
        list(DataLoader(_BadAt7(), batch_size=batch_size, collate_fn=collate_fn))
    assert info.value.__notes__ == [note]
    assert "chute" not in str(info.value)  # the exception's own message is torch's (the dataset's)


def test_shutdown_does_not_hang_on_a_queue_lock_left_held():
    # torch's SIGCHLD handler can raise right after put() took a queue's lock, leaving it held. Shutdown must
    # still finish (the worker is terminated after the join timeout) instead of blocking forever.
    it = iter(DataLoader(Arange(40), batch_size=4, num_workers=1))
    next(it)
    worker = it._workers[0]
    assert it._index_queues[0]._notempty.acquire(timeout=1)  # the leaked lock
    t0 = time.monotonic()
    it._shutdown_workers()
    assert time.monotonic() - t0 < 15
    worker.join(5)
    assert not worker.is_alive()


def test_stats_report_each_paths_pinning_and_held_batches(monkeypatch):
    from chute.dataloader.iterator import MultiProcessIter, SingleProcessIter
    from chute.dataloader.tensor_path import TensorPlan

    def loaders(**kwargs):
        return {
            "generic, in process": DataLoader(Arange(8), batch_size=4, **kwargs),
            "generic, workers": DataLoader(Arange(8), batch_size=4, num_workers=1, **kwargs),
            "tensor": DataLoader(TensorDataset(torch.arange(8)), batch_size=4, **kwargs),
        }

    held = {
        "generic, in process": SingleProcessIter.held_batches,
        "generic, workers": MultiProcessIter.held_batches,
        "tensor": TensorPlan.held_batches,
    }
    assert len(set(held.values())) == 3 and all(held.values())  # each path states its own
    for name, loader in loaders().items():
        stats = loader.stats()
        assert stats["path"] == ("fast:tensor" if name == "tensor" else "generic"), name
        assert stats["held_batches"] == held[name], name
        assert stats["pinning"] == "none", name
        next(iter(loader))
        assert loader.stats()["pinning"] == "none", name

    # pin_memory=True with an accelerator (stood in for): torch's iterator base decides for every path, and
    # every path copies each batch with torch's pin_memory(): on a pin thread, or in line in process as torch.
    pinned = []

    def fake_pin(data, device=None):
        pinned.append(device)
        return data

    _fake_accelerator(monkeypatch, fake_pin)
    where = {"generic, in process": pinning.IN_LINE, "generic, workers": pinning.AHEAD, "tensor": pinning.AHEAD}
    for name, loader in loaders(pin_memory=True).items():
        assert loader.stats()["pinning"] == "pin_memory=True: decided when iteration starts", name
        pinned.clear()
        batches = list(loader)
        assert len(batches) == 2 and pinned == ["cuda", "cuda"], name
        assert loader.stats()["pinning"] == pinning.describe("cuda", where[name]), name
        assert where[name] in loader.stats()["pinning"], name


def _fake_accelerator(monkeypatch, pin) -> None:
    """torch's iterator base sees an accelerator, and ``pin`` stands in for torch's pin_memory()."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.utils.data._utils.pin_memory, "pin_memory", pin)


class PinProbe:
    """A stand-in for torch's pin_memory() that copies each batch's tensors and notes the thread it ran on, and
    when the pin of each batch started."""

    def __init__(self, batches: int):
        self.threads: list[int] = []
        self.started = [threading.Event() for _ in range(batches)]
        self._count = 0

    def __call__(self, data, device=None):
        k, self._count = self._count, self._count + 1  # one pin thread: no race
        self.threads.append(threading.get_ident())
        self.started[k].set()
        return [t.clone() for t in data]


@pytest.mark.parametrize("kind", ["tensor", "workers"])
def test_pin_memory_pins_on_a_thread_of_its_own_while_the_loop_works(monkeypatch, kind):
    # torch pins the batches of its workers on a pin thread, off the training loop; so does chute, on the worker
    # path and the fast paths: while the loop works on batch k, batch k+1 is pinned. (Pinned on the loop's
    # thread, a 154 MB batch's copy would sit in series with every training step.)
    pin = PinProbe(10)
    _fake_accelerator(monkeypatch, pin)
    if kind == "workers":
        monkeypatch.setenv("CHUTE_FAST_PATHS", "0")
    data = torch.arange(40 * 3, dtype=torch.float32).reshape(40, 3)
    loader = DataLoader(TensorDataset(data), batch_size=4, pin_memory=True, num_workers=2 if kind == "workers" else 0)
    assert loader.stats()["path"] == ("fast:tensor" if kind == "tensor" else "generic")
    got = []
    for k, (batch,) in enumerate(loader):
        got.append(batch)
        if k + 1 < 10:  # the loop's step on batch k: meanwhile the pin of batch k+1 starts
            assert pin.started[k + 1].wait(timeout=10), f"batch {k + 1} was not pinned while the loop had batch {k}"
    assert torch.equal(torch.cat(got), data)  # every batch, in order
    assert len(pin.threads) == 10 and threading.get_ident() not in pin.threads
    assert len(set(pin.threads)) == 1  # one pin thread for the epoch
    assert loader.stats()["batches"] == 10 and pinning.AHEAD in loader.stats()["pinning"]


class FailsAt(Arange):
    def __init__(self, n, bad):
        super().__init__(n)
        self.bad = bad

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"sample {i} is bad")
        return super().__getitem__(i)


def test_pin_memory_ahead_keeps_errors_in_place_and_a_new_epoch_whole(monkeypatch):
    # The error of a batch taken ahead is raised at the call that would have returned that batch, after the
    # batches before it, and the next call goes on, as torch's iterator does. A new epoch on persistent workers
    # after an early break starts whole: the batch taken ahead belonged to the epoch left.
    _fake_accelerator(monkeypatch, lambda data, device=None: data)
    loader = DataLoader(FailsAt(24, 9), batch_size=4, pin_memory=True, num_workers=2)
    it = iter(loader)
    assert [next(it)["i"].tolist() for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="sample 9 is bad"):
        next(it)
    assert [b["i"].tolist()[0] for b in it] == [12, 16, 20]
    loader = DataLoader(Arange(24), batch_size=4, pin_memory=True, num_workers=2, persistent_workers=True)
    it = iter(loader)
    next(it)
    assert [b["i"].tolist()[0] for b in loader] == [0, 4, 8, 12, 16, 20]
