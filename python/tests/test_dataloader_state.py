"""chute.DataLoader's state_dict() / load_state_dict(), with torchdata StatefulDataLoader's meaning: a state taken
at any point of an epoch, loaded into a DataLoader built the same way (in a new process, as after a crash),
makes it yield byte for byte the batches the uninterrupted run yields next, on every path: the ImageFolder fast
path (random augmentations included), the tensor fast path, and the generic path with and without workers (the
sampler's order and generator, each worker's random draws, batches prefetched and never received). And every
malformed or mismatched state is refused, naming what differs.

A "checkpoint" here is what a training script saves: the loader's state through JSON, and the process's global
RNG states (the model's own draws come from them, and with num_workers=0 the dataset's too).
"""

from __future__ import annotations

import gc
import json
import random

import numpy as np
import pytest
import torch
from conftest import chute_threads
from torch.utils.data import Dataset, IterableDataset, RandomSampler, TensorDataset

import chute
from chute.bench.pil_reference import as_torchvision, real_torchvision

T = real_torchvision() or as_torchvision()
N = 23  # samples: batches of 4, the last one short


class Noisy(Dataset):
    """A dataset with random transforms (torch's, Python's and numpy's global RNGs, as a worker seeds them): no
    fast path, so the generic path runs it; its draws depend on the worker and on how far it got."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([float(i)]), torch.rand(2), random.random(), float(np.random.rand())


class Stream(IterableDataset):
    """An iterable dataset (with random draws): resumed by replaying the epoch from its start."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(first, N, step):
            yield torch.tensor([float(i)]), torch.rand(2)


def checkpoint(loader) -> tuple:
    return (
        json.loads(json.dumps(loader.state_dict())),
        torch.get_rng_state(),
        random.getstate(),
        np.random.get_state(),
    )


def restore(loader, saved) -> None:
    state, torch_rng, py_rng, np_rng = saved
    torch.set_rng_state(torch_rng)
    random.setstate(py_rng)
    np.random.set_state(np_rng)
    loader.load_state_dict(state)


def flat(batch) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, (list, tuple)):
        return [t for b in batch for t in flat(b)]
    return [torch.tensor(batch)]


def same(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        fx, fy = flat(x), flat(y)
        if len(fx) != len(fy) or any(p.dtype != q.dtype or not torch.equal(p, q) for p, q in zip(fx, fy)):
            return False
    return True


def clone(batch):
    return [t.clone() for t in flat(batch)]


def epochs(loader, count: int) -> list[list]:
    return [[clone(b) for b in loader] for _ in range(count)]


def check_resumes(make, cuts, epoch: int = 1) -> None:
    """For each cut (batches of epoch `epoch` received before the checkpoint; "end": after the epoch's
    StopIteration), a checkpoint taken there and resumed in a new DataLoader gives the uninterrupted run's
    batches: the rest of that epoch, and the next epoch."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    start = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    expected = epochs(make(), epoch + 2)
    for cut in cuts:
        torch.set_rng_state(start[0])
        random.setstate(start[1])
        np.random.set_state(start[2])
        loader = make()
        epochs(loader, epoch)
        it = iter(loader)
        got = []
        if cut == "end":
            got = [clone(b) for b in it]
        else:
            for _ in range(cut):
                got.append(clone(next(it)))
        saved = checkpoint(loader)
        del it, loader
        torch.manual_seed(1234)  # a new process: its RNGs are elsewhere until the checkpoint is restored
        random.seed(1234)
        np.random.seed(1234)
        resumed = make()
        restore(resumed, saved)
        if cut == "end":
            rest = epochs(resumed, 1)[0]
            assert same(rest, expected[epoch + 1]), "after the epoch's end: the next epoch"
            continue
        got += epochs(resumed, 1)[0]
        assert same(got, expected[epoch]), f"cut after batch {cut}: the epoch differs"
        assert same(epochs(resumed, 1)[0], expected[epoch + 1]), f"cut after batch {cut}: the next epoch differs"


def tensor_loader(num_workers, generator=True, **kwargs):
    x = torch.arange(N * 3, dtype=torch.float32).reshape(N, 3)
    y = torch.arange(N) % 5
    gen = torch.Generator().manual_seed(7) if generator else None
    loader = chute.DataLoader(
        TensorDataset(x, y), batch_size=4, shuffle=True, num_workers=num_workers, generator=gen, **kwargs
    )
    assert loader.stats()["path"] == "fast:tensor"
    return loader


def folder_loader(root, num_workers, generator=True):
    transform = T.Compose([T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.PILToTensor()])
    gen = torch.Generator().manual_seed(7) if generator else None
    loader = chute.DataLoader(
        T.ImageFolder(str(root), transform=transform), batch_size=5, shuffle=True, num_workers=num_workers,
        generator=gen,
    )  # fmt: skip
    assert loader.stats()["path"] == "fast:imagefolder"
    return loader


def generic_loader(num_workers, generator=True, **kwargs):
    gen = torch.Generator().manual_seed(7) if generator else None
    loader = chute.DataLoader(Noisy(), batch_size=4, shuffle=True, num_workers=num_workers, generator=gen, **kwargs)
    assert loader.stats()["path"] == "generic"
    return loader


CUTS = [0, 1, 3, 6, "end"]  # before the first batch, after it, mid-way, after the last (6 of 6), after the end


@pytest.mark.parametrize("num_workers", [0, 2])
def test_tensor_path_resumes_exactly(num_workers):
    check_resumes(lambda: tensor_loader(num_workers), CUTS)
    check_resumes(lambda: tensor_loader(num_workers, generator=False), [2, "end"], epoch=0)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_imagefolder_path_resumes_exactly_augmentations_included(folder, num_workers):
    check_resumes(lambda: folder_loader(folder, num_workers), [0, 1, 4, 8, "end"])  # 36 images: 8 batches
    check_resumes(lambda: folder_loader(folder, num_workers, generator=False), [3], epoch=0)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_generic_path_resumes_exactly_random_draws_included(num_workers):
    check_resumes(lambda: generic_loader(num_workers), CUTS)


def test_generic_path_with_persistent_workers_and_the_global_rng():
    check_resumes(lambda: generic_loader(2, generator=False, persistent_workers=True), [0, 1, 5, 6, "end"])


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("persistent", [False, True])
def test_snapshots_every_n_steps_resume_exactly_too(persistent):
    """snapshot_every_n_steps=4: workers send their RNG states only around every 4th batch (and the epoch's
    last); a state between snapshots makes the batches since the last one again, and drops them."""
    check_resumes(lambda: generic_loader(2, snapshot_every_n_steps=4, persistent_workers=persistent), CUTS)
    check_resumes(lambda: generic_loader(3, snapshot_every_n_steps=5, persistent_workers=persistent), [2, 5, 6])


def test_snapshots_every_n_steps_send_fewer_worker_states():
    """What the option is for: replies without RNG states (they cost the workers about 0.1 ms each)."""
    sent = []
    for every in (1, 4):
        loader = generic_loader(2, snapshot_every_n_steps=every)
        calls = []
        wants = loader._chute_tracker.wants_snapshot
        loader._chute_tracker.wants_snapshot = lambda it, b, wants=wants, calls=calls: (
            calls.append(wants(it, b)) or calls[-1]
        )
        list(loader)
        sent.append(sum(calls))
    assert sent == [6, 4]  # 6 batches: with every=4, batches 2 and 3 (before step 4) and 4, 5 (the last two)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_dataset_resumes_by_replaying_the_epoch(num_workers):
    def make():
        return chute.DataLoader(Stream(), batch_size=3, num_workers=num_workers)

    check_resumes(make, [0, 2, "end"])


def test_a_subset_and_an_explicit_sampler_resume(folder):
    def make():
        dataset = torch.utils.data.Subset(TensorDataset(torch.arange(40.0)), list(range(3, 40, 2)))
        return chute.DataLoader(
            dataset, batch_size=3, sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(2))
        )

    check_resumes(make, [1, 4, "end"])


def test_a_distributed_sampler_resumes_in_its_epoch():
    """DistributedSampler keys its order by the epoch its set_epoch() got: the state remembers it, and resuming
    with the sampler at another epoch is an error that says what to call."""
    dataset = TensorDataset(torch.arange(40))

    def make():
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1, seed=3)
        return chute.DataLoader(dataset, batch_size=4, sampler=sampler)

    reference = make()
    reference.sampler.set_epoch(5)
    expected = [b[0].tolist() for b in reference]
    first = make()
    first.sampler.set_epoch(5)
    it = iter(first)
    head = [next(it)[0].tolist() for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match=r"DistributedSampler.epoch=5, this DataLoader's sampler is at epoch 0: call "
                       r"sampler.set_epoch\(5\)"):  # fmt: skip
        iter(resumed)
    resumed.sampler.set_epoch(5)  # the state is still loaded
    assert head + [b[0].tolist() for b in resumed] == expected


def test_the_global_rng_is_left_as_the_caller_has_it():
    """Resuming replays the epoch's draws from the global RNG in a fork: the caller's RNG is untouched (an
    uninterrupted run drew those before its checkpoint, so they are in the caller's saved state)."""
    loader = tensor_loader(0, generator=False)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed = tensor_loader(0, generator=False)
    resumed.load_state_dict(state)
    before = torch.get_rng_state()
    next(iter(resumed))
    assert torch.equal(torch.get_rng_state(), before)


def test_a_dropped_dataloader_goes_at_once(folder):
    """Its resume tracker makes no reference cycle: an ImageFolder path's engine threads end when the last
    reference to the DataLoader goes, not at a later garbage collection (a later fork would find them)."""
    gc.collect()
    assert not chute_threads()
    gc.disable()
    try:
        loader = folder_loader(folder, 0)
        next(iter(loader))
        assert chute_threads()
        loader.state_dict()
        del loader
        assert not chute_threads()
    finally:
        gc.enable()


# ---- StatefulDataLoader's API --------------------------------------------------------------------------


def test_statefuldataloader_calls_work():
    loader = tensor_loader(0, snapshot_every_n_steps=10)
    assert loader.snapshot_every_n_steps == 10
    initial = loader.state_dict()  # before any iteration: the start
    assert initial["epoch"] is None and initial["epochs"] == 0
    assert json.loads(json.dumps(initial)) == initial
    loader.load_state_dict({})  # torchdata's no-op
    first = [clone(b) for b in loader]
    again = tensor_loader(0)
    again.load_state_dict(initial)
    assert same([clone(b) for b in again], first)
    resumed = tensor_loader(0)
    resumed.load_state_dict(initial)
    assert resumed.state_dict() == initial  # loaded, not yet iterated: where it says
    with pytest.raises(ValueError, match="snapshot_every_n_steps must be a positive integer"):
        tensor_loader(0, snapshot_every_n_steps=0)


def test_in_order_false_cannot_say_where_it_is():
    loader = generic_loader(2, in_order=False)
    next(iter(loader))
    with pytest.raises(ValueError, match=r"in_order=False: batches come as they finish"):
        loader.state_dict()


# ---- refusals ----------------------------------------------------------------------------------------


def _mid_state(**changes) -> dict:
    loader = generic_loader(2)
    it = iter(loader)
    next(it)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    epoch = changes.pop("epoch", {})
    if isinstance(epoch, dict):  # changes within the epoch's entry
        epoch = {**state["epoch"], **epoch}
    return {**state, **changes, "epoch": epoch}


@pytest.mark.parametrize(
    ("make", "change", "message"),
    [
        (
            lambda: chute.DataLoader(
                Noisy(), batch_size=8, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(7)
            ),
            {},
            r"batch_size=4, this DataLoader has batch_size=8",
        ),
        (lambda: generic_loader(2, drop_last=True), {}, r"drop_last=False, this DataLoader has drop_last=True"),
        (
            lambda: chute.DataLoader(
                Noisy(), batch_size=4, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(8)
            ),
            {},
            r"generator seeds \[7\], this DataLoader has generator seeds \[8\]",
        ),
        (
            lambda: chute.DataLoader(Noisy(), batch_size=4, num_workers=2, generator=torch.Generator().manual_seed(7)),
            {},
            r"samplers \['BatchSampler', 'RandomSampler'\], this DataLoader has samplers \['BatchSampler', 'SequentialSampler'\]",
        ),
        (
            lambda: generic_loader(1),
            {},
            r"num_workers=2, whose datasets drew random numbers, this DataLoader has num_workers=1",
        ),
        (
            lambda: generic_loader(2, persistent_workers=True),
            {},
            r"persistent_workers=False, this DataLoader has persistent_workers=True",
        ),
        (lambda: tensor_loader(2), {}, r"the 'generic' path, this DataLoader has the 'fast:tensor' path"),
        (lambda: generic_loader(2), {"dataset_size": 30}, r"dataset of 30 samples, this DataLoader's has 23"),
        (lambda: generic_loader(2), {"epoch": {"consumed": -1}}, r"epoch.consumed is -1, not an integer >= 0"),
        (lambda: generic_loader(2), {"epoch": {"consumed": 2.0}}, r"epoch.consumed is 2.0, not an integer >= 0"),
        (lambda: generic_loader(2), {"epoch": {"consumed": 7}}, r"epoch.consumed 7 is beyond its 6 batches"),
        (lambda: generic_loader(2), {"epochs": -5}, r"epochs is -5, not an integer >= 0"),
        (
            lambda: generic_loader(2),
            {"epoch": {"workers": ["seeded"]}},
            r"epoch.workers is not one entry per worker of 2",
        ),
        (
            lambda: generic_loader(2),
            {"epoch": {"workers": [{"torch": "x"}, "seeded"]}},
            r"epoch.workers\[0\] is not a worker's RNG states",
        ),
        (
            lambda: generic_loader(2),
            {"rng": {"global": "!!", "generators": []}},
            r"holds 0 generator states for 1 generators",
        ),
        (lambda: generic_loader(2), {"format_version": 9}, r"not a chute.DataLoader state of format_version 1"),
        (lambda: generic_loader(2), {"epoch": "x"}, r"epoch is 'x', not None or a dict"),
    ],
)
def test_mismatched_or_malformed_states_are_refused_by_name(make, change, message):
    with pytest.raises(ValueError, match=message):
        make().load_state_dict(_mid_state(**change))


def test_what_is_no_state_is_refused():
    loader = generic_loader(0)
    with pytest.raises(TypeError, match=r"takes the dict state_dict\(\) returned, got None"):
        loader.load_state_dict(None)
    with pytest.raises(ValueError, match=r"a chute.Loader state goes to chute.Loader"):
        loader.load_state_dict({"format_version": 2, "epoch": 0, "position": 0})
    state = _mid_state()
    del state["rng"]
    with pytest.raises(ValueError, match=r"the state has no 'rng'"):
        loader.load_state_dict(state)
