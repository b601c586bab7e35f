"""The tensor-dataset fast path: batches identical to torch's DataLoader, or a Fallback that says why."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from conftest import chute_threads
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
)

from chute.dataloader import plan as seam


def epoch(plan, loader: DataLoader):
    """One epoch as chute.DataLoader runs it (its PlanIter): the base seed drawn from the loader's
    generator as torch's iterator draws it, then the batch sampler's iterator, fed to the plan."""
    base_seed = torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
    return plan.batches(iter(loader._index_sampler), base_seed=base_seed)


def run_fast(loader: DataLoader) -> list:
    """What a DataLoader built on the fast path yields for one epoch."""
    plan = seam.choose(loader)
    assert isinstance(plan, seam.Plan), str(plan)
    assert plan.kind == "tensor"
    try:
        return list(epoch(plan, loader))
    finally:
        plan.close()


def assert_same_batches(fast: list, ref: list) -> None:
    assert len(fast) == len(ref)
    for b, (f, r) in enumerate(zip(fast, ref)):
        assert type(f) is type(r), f"batch {b}"
        fs, rs = (f, r) if isinstance(f, list) else ([f], [r])
        assert len(fs) == len(rs)
        for x, y in zip(fs, rs):
            assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride(), f"batch {b}"
            assert x.is_contiguous()
            assert torch.equal(x, y), f"batch {b}"


def compare(dataset, **kwargs) -> list:
    """Same seed, same sampler draws: the fast path and torch's DataLoader must give the same batches."""
    ref = list(DataLoader(dataset, generator=torch.Generator().manual_seed(7), **kwargs))
    fast = run_fast(DataLoader(dataset, generator=torch.Generator().manual_seed(7), **kwargs))
    assert_same_batches(fast, ref)
    return fast


def images_and_labels(n=50):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, 8, 6, generator=g), torch.randint(0, 10, (n,), generator=g))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size", [1, 7, 50, 64])
def test_same_batches_as_torch(shuffle, drop_last, batch_size):
    compare(images_and_labels(), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)


@pytest.mark.parametrize(
    "make_sampler",
    [
        lambda n: SequentialSampler(range(n)),
        lambda n: RandomSampler(range(n), replacement=True, num_samples=2 * n),
        lambda n: SubsetRandomSampler([3, 1, 4, 1, 5, 9, 2, 6]),
        lambda n: WeightedRandomSampler(torch.linspace(0.1, 1, n), num_samples=30),
    ],
    ids=["sequential", "replacement", "subset", "weighted"],
)
def test_samplers(make_sampler):
    ds = images_and_labels()
    torch.manual_seed(3)
    ref = list(DataLoader(ds, batch_size=4, sampler=make_sampler(len(ds))))
    torch.manual_seed(3)
    fast = run_fast(DataLoader(ds, batch_size=4, sampler=make_sampler(len(ds))))
    assert_same_batches(fast, ref)


def test_batch_sampler_and_repeated_indices():
    ds = images_and_labels(10)
    batches = [[0, 0, 9], [5], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0], [-1, -10]]
    assert_same_batches(run_fast(DataLoader(ds, batch_sampler=batches)), list(DataLoader(ds, batch_sampler=batches)))

    def bs():
        return BatchSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(1)), 3, drop_last=False)

    assert_same_batches(run_fast(DataLoader(ds, batch_sampler=bs())), list(DataLoader(ds, batch_sampler=bs())))


@pytest.mark.parametrize(
    "dtype",
    [
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.bool,
        torch.complex64,
    ],
)
def test_dtypes(dtype):
    x = (torch.arange(40 * 3) % 7).reshape(40, 3).to(dtype)
    y = torch.arange(40, dtype=torch.float64)
    compare(TensorDataset(x, y), batch_size=6, shuffle=True)


def test_many_tensors_and_odd_row_sizes():
    n = 33
    ds = TensorDataset(
        torch.randn(n, 5, 7), torch.arange(n), torch.rand(n, 1, 1, 3), torch.randint(0, 255, (n, 13), dtype=torch.uint8)
    )
    compare(ds, batch_size=5, shuffle=True)
    compare(TensorDataset(torch.randn(n, 9)), batch_size=4)  # a single tensor: batches are 1-element lists


def test_large_batches_use_several_threads():
    ds = TensorDataset(torch.randn(300, 3, 64, 64), torch.arange(300))  # 48 KB rows: chunked across threads
    compare(ds, batch_size=128, shuffle=True)


def test_batches_are_fresh_memory_and_can_be_kept():
    ds = images_and_labels(20)
    loader = DataLoader(ds, batch_size=4, shuffle=True)
    plan = seam.choose(loader)
    kept = []
    for _ in range(3):
        kept += list(epoch(plan, loader))
    ptrs = {b[0].data_ptr() for b in kept}
    assert len(kept) == 15
    assert len(ptrs) == len(kept)  # no batch handed out twice while held
    for b in kept:
        for row, label in zip(b[0], b[1]):  # each kept row is still the dataset row it came from
            matches = (ds.tensors[0] == row).flatten(1).all(1)
            assert matches.sum() == 1 and ds.tensors[1][matches][0] == label
    plan.close()


class Columns(Dataset):
    """The columns protocol: dataset[i] is a tuple of the columns' rows."""

    def __init__(self, *columns):
        self.chute_columns = columns

    def __len__(self):
        return len(self.chute_columns[0])

    def __getitem__(self, i):
        return tuple(c[i] for c in self.chute_columns)


class OneArray(Dataset):
    def __init__(self, a):
        self.chute_columns = a

    def __len__(self):
        return len(self.chute_columns)

    def __getitem__(self, i):
        return self.chute_columns[i]


def test_numpy_columns():
    rng = np.random.default_rng(0)
    ds = Columns(
        rng.random((30, 4, 2), dtype=np.float32),
        rng.integers(0, 9, 30),
        (rng.random(30) > 0.5),
        rng.random(30).astype(np.float16),
    )
    compare(ds, batch_size=4, shuffle=True)
    compare(OneArray(rng.integers(0, 255, (30, 3, 5), dtype=np.uint8)), batch_size=8, shuffle=True)
    compare(OneArray(torch.randn(30, 2)), batch_size=8)


def test_numpy_memmap(tmp_path):
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.int32, shape=(25, 6))
    mm[:] = np.arange(150).reshape(25, 6)
    compare(OneArray(mm), batch_size=4, shuffle=True)


def test_out_of_range_index_raises_index_error_in_its_batch():
    ds = images_and_labels(10)
    loader = DataLoader(ds, batch_sampler=[[0, 1], [2, 10], [3]])
    with pytest.raises(IndexError):  # torch's own behaviour: IndexError from tensor indexing
        list(DataLoader(ds, batch_sampler=[[0, 1], [2, 10], [3]]))
    plan = seam.choose(loader)
    it = epoch(plan, loader)
    first = next(it)
    assert torch.equal(first[1], ds.tensors[1][:2])
    with pytest.raises(IndexError, match=r"index 10 is out of range for a dataset of 10 samples"):
        next(it)
    third = next(it)  # as torch's iterator: the next call goes on with the following batch
    assert torch.equal(third[1], ds.tensors[1][3:4])
    with pytest.raises(StopIteration):
        next(it)
    with pytest.raises(IndexError, match=r"index -11 .* 10 samples"):
        list(plan.batches([[-11]]))
    with pytest.raises(TypeError, match="non-integer"):
        list(plan.batches([[0.5]]))
    plan.close()


def test_early_break_and_close_leave_no_thread():
    before = _gather_threads()
    loader = DataLoader(TensorDataset(torch.randn(400, 1000)), batch_size=8)
    plan = seam.choose(loader)
    it = epoch(plan, loader)
    for _ in zip(range(3), it):  # an early break with batches still queued, the epoch kept open
        pass
    assert _gather_threads() > before  # named by their creator before they copied anything
    plan.close()
    plan.close()
    assert _gather_threads_drop_to(before)
    with pytest.raises(RuntimeError, match="closed"):
        next(plan.batches([[0]]))


def test_worker_init_fn_without_workers_keeps_the_fast_path():
    # torch calls worker_init_fn only in worker processes: with num_workers=0 it never runs, so nothing is lost.
    p = seam.choose(DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, worker_init_fn=print))
    assert isinstance(p, seam.Plan), p
    p.close()


def test_fast_paths_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("CHUTE_FAST_PATHS", "0")
    p = seam.choose(DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2))
    assert isinstance(p, seam.Fallback) and "CHUTE_FAST_PATHS=0" in str(p)


def test_gather_threads_are_parked_between_epochs():
    import chute

    before = _gather_threads()
    fast = chute.DataLoader(TensorDataset(torch.randn(64, 100)), batch_size=8, shuffle=True)
    assert fast.stats()["path"] == "fast:tensor"
    assert _gather_threads_drop_to(before)  # parked after the probe
    for _ in range(2):
        assert len(list(fast)) == 8
        assert _gather_threads_drop_to(before)  # parked after each epoch
    generic = chute.DataLoader(OneArrayGetitem(), batch_size=4, num_workers=2)
    assert [b.tolist() for b in generic] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(list(fast)) == 8  # and the fast path starts its threads again


class OneArrayGetitem(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i


def _gather_threads() -> int:
    return chute_threads().count("chute-gather")


def _gather_threads_drop_to(n: int, timeout_s: float = 30) -> bool:
    """Whether the count of chute-gather threads comes down to n. park()/close() have joined them when they
    return, but the kernel drops a joined thread's /proc/self/task entry a moment later: wait for that,
    with a deadline that fails the test rather than a fixed sleep that passes only on a quiet machine."""
    deadline = time.monotonic() + timeout_s
    while _gather_threads() > n:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return _gather_threads() == n


def test_empty_dataset_and_empty_epoch():
    ds = TensorDataset(torch.zeros(0, 3))
    assert run_fast(DataLoader(ds, batch_size=4)) == []
    assert run_fast(DataLoader(images_and_labels(3), batch_size=4, drop_last=True)) == []


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: DataLoader(TensorDataset(torch.randn(4, 5).t()), batch_size=2), "not contiguous"),
        (
            lambda: DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, collate_fn=lambda b: b),
            "custom collate_fn",
        ),
        (lambda: DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=None), "batch_size=None"),
        (lambda: DataLoader(Stream(), batch_size=2), "iterable-style"),
        (lambda: DataLoader(TensorDataset(torch.randn(8, 2, requires_grad=True)), batch_size=2), "requires grad"),
        (lambda: DataLoader(Columns(np.array(["a", "b"])), batch_size=2), "dtype <U1"),
        (lambda: DataLoader(Columns(np.zeros((6, 4))[:, ::2]), batch_size=2), "non-contiguous numpy"),
        (lambda: DataLoader(Columns(np.zeros(4, dtype=">f4")), batch_size=2), "byte order"),
        (lambda: DataLoader(Columns(torch.zeros(4), torch.zeros(5)), batch_size=2), "column 1 has 5 rows"),
        (lambda: DataLoader(Columns([1, 2, 3]), batch_size=2), "column 0 is a list, not a tensor"),
        (lambda: DataLoader(Transformed(torch.arange(6.0)), batch_size=2), "differs from default_collate"),
        (lambda: DataLoader(list(range(5)), batch_size=2), "builtins.list has no native fast path"),
        (
            lambda: DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=2, worker_init_fn=print),
            "worker_init_fn is set",
        ),
    ],
    ids=[
        "noncontig",
        "collate",
        "nobatch",
        "iterable",
        "grad",
        "strings",
        "np-strided",
        "big-endian",
        "lengths",
        "list-column",
        "transformed",
        "plain-list",
        "worker-init",
    ],
)
def test_fallback_reasons(make, reason):
    p = seam.choose(make())
    assert isinstance(p, seam.Fallback), p
    assert reason in str(p)
    assert "\n" not in str(p)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


class Transformed(OneArray):
    def __getitem__(self, i):  # breaks the protocol's promise: plan must notice, not trust
        return self.chute_columns[i] * 2


def test_subclass_overriding_getitem_is_not_trusted():
    class Scaled(TensorDataset):
        def __getitem__(self, i):
            return tuple(t[i] + 1 for t in self.tensors)

    p = seam.choose(DataLoader(Scaled(torch.zeros(4, 2)), batch_size=2))
    assert isinstance(p, seam.Fallback)

    class Batched(TensorDataset):  # torch's fetcher calls __getitems__ when a dataset has one
        def __getitems__(self, indices):
            return [tuple(t[i] * 0 for t in self.tensors) for i in indices]

    p = seam.choose(DataLoader(Batched(torch.ones(4, 2)), batch_size=2))
    assert isinstance(p, seam.Fallback) and "__getitems__" in str(p)


def test_plan_threads_run_while_consumer_holds_the_gil():
    """The gather runs without the GIL: a Python thread spinning meanwhile does not stop batches coming."""
    stop = threading.Event()
    spins = [0]

    def spin():
        while not stop.is_set():
            spins[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        compare(TensorDataset(torch.randn(256, 3, 32, 32), torch.arange(256)), batch_size=32, shuffle=True)
    finally:
        stop.set()
        t.join()
    assert spins[0] > 0


def test_dataset_changed_between_epochs_is_planned_again_or_run_in_process(caplog):
    ds = images_and_labels(12)
    loader = DataLoader(ds, batch_size=5)
    plan = seam.choose(loader)
    list(epoch(plan, loader))
    ds.tensors = (torch.randn(12, 2), torch.arange(12) * 3)  # new tensors: planned again, natively
    assert_same_batches(list(epoch(plan, loader)), list(DataLoader(ds, batch_size=5)))
    assert plan.kind == "tensor" and plan._gatherer is not None
    ds.tensors = (torch.randn(2, 12).t(), torch.arange(12))  # no longer gatherable: torch's path, with a warning
    with caplog.at_level("WARNING", logger="chute.dataloader"):
        fast = list(epoch(plan, loader))
    assert "not contiguous" in caplog.text and "in-process" in caplog.text
    assert_same_batches(fast, list(DataLoader(ds, batch_size=5)))
    plan.close()


# ---- columns changed under the fast path mid-epoch; fork ------------------------------------------------

CHANGED_MID_EPOCH = """
import sys, torch, chute
from torch.utils.data import DataLoader, TensorDataset

def change(ds, how):
    x = ds.tensors[0]
    if how == "resize":  # grows in place: the storage's old memory is freed at once
        x.resize_(x.shape[0] * 2, *x.shape[1:])
    elif how == "data":  # new storage for the same tensor object
        x.data = x.data.clone()
    elif how == "replace":
        ds.tensors = (ds.tensors[0] + 1, ds.tensors[1])
    elif how == "shrink":
        x.resize_(x.shape[0] // 4, *x.shape[1:])

def run(make_loader, how):
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(600, 20000), torch.arange(600))  # 48 MB: mmap'ed, unmapped when freed
    out = []
    try:
        for k, (x, y) in enumerate(make_loader(ds)):
            out.append((x.sum().item(), y.tolist()))
            if k == 1:
                change(ds, how)
    except IndexError as e:
        out.append("IndexError")
    return out

how = sys.argv[1]
ref = run(lambda ds: DataLoader(ds, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1)), how)
fast = run(lambda ds: chute.DataLoader(ds, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1)),
           how)
assert fast == ref, (len(fast), len(ref))
print("ok", len(ref))
"""


@pytest.mark.parametrize("how", ["resize", "data", "replace", "shrink"])
def test_columns_changed_mid_epoch_give_torchs_batches_never_a_crash(how):
    r = subprocess.run([sys.executable, "-c", CHANGED_MID_EPOCH, how], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-3000:]}"  # before: -11 (SIGSEGV) for resize
    assert r.stdout.startswith("ok")


def test_fast_path_made_before_fork_works_in_the_child():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            """
import os, torch, chute
from torch.utils.data import TensorDataset
ds = TensorDataset(torch.arange(40 * 3).view(40, 3), torch.arange(40))
fast = chute.DataLoader(ds, batch_size=8)
assert fast.stats()["path"] == "fast:tensor"
it = iter(fast)
next(it)  # gather threads running, the epoch open
pid = os.fork()
if pid == 0:
    got = torch.cat([y for _, y in fast]).tolist()
    os._exit(0 if got == list(range(40)) else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print("ok")
""",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
