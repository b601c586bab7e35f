"""Elastic resume (docs/ORDER.md, "Resume"): every old rank's state resumes the interrupted epoch on another
number of ranks, each sample the old ranks had not received delivered once (under even_split, fewer than the
new world size left out, all ranks equal), with the pixels of the uninterrupted run; the next epochs are the
new world size's own. And every malformed or mismatched state is refused, naming what is wrong.

Every sample's label is its own number (shard_tars.py), so the labels say which samples a rank delivered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from shard_tars import write_tars

import chute
from chute import _native

SIZES = [7, 3, 12, 1, 9, 0, 5, 8, 2, 11, 1]  # 59 samples in 11 tars, one of them empty
N = sum(SIZES)
EPOCH = 1
TRANSFORMS = [chute.RandomResizedCrop(12), chute.RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic")
    tars = write_tars(root / "tars", SIZES)
    return lambda: chute.TarDataset(tars, cache_dir=root / "cache")


def make(source, rank, world, order="sample", even_split=False, **kwargs) -> chute.Loader:
    kwargs = dict(batch_size=4, shuffle=True, seed=3, transforms=TRANSFORMS, num_threads=1, **kwargs)
    if order == "shards":
        kwargs["shard_window"] = 3
    return chute.Loader(source(), rank=rank, world_size=world, order=order, even_split=even_split, **kwargs)


def take(loader, steps: int | None) -> list[tuple[int, torch.Tensor]]:
    """(label, image) of each sample of the next `steps` batches (all that are left: None)."""
    out = []
    for step, (images, labels) in enumerate(loader):
        out += [(int(y), x.clone()) for x, y in zip(images, labels)]
        if steps is not None and step + 1 == steps:
            break
    return out


def roundtrip(state):
    return json.loads(json.dumps(state))  # what a checkpoint file gives back


def reference_pixels(source, order) -> dict[int, torch.Tensor]:
    """Each sample's image in epoch EPOCH of an uninterrupted one-rank run: augmentation is keyed by (seed,
    epoch, sample), so it is every rank's, on any world size."""
    loader = make(source, 0, 1, order)
    loader.set_epoch(EPOCH)
    return dict(take(loader, None))


def interrupt(source, world, order, even_split, steps) -> tuple[list, list]:
    """`world` ranks deliver `steps[r]` batches of epoch EPOCH each; their states (through JSON) and labels."""
    states, delivered = [], []
    for rank in range(world):
        loader = make(source, rank, world, order, even_split)
        loader.set_epoch(EPOCH)
        got = take(loader, steps[rank])
        delivered += got
        states.append(roundtrip(loader.state_dict()))
        loader.close()
    return states, delivered


def visited(world, order, even_split) -> set[int]:
    """The samples a whole epoch EPOCH on `world` ranks visits."""
    kw = {"shard_sizes": SIZES, "shard_window": 3} if order == "shards" else {}
    return {
        int(i)
        for r in range(world)
        for i in _native.epoch_order(N, True, 3, EPOCH, rank=r, world_size=world, even_split=even_split, **kw)
    }


@pytest.mark.parametrize("order", ["sample", "shards"])
@pytest.mark.parametrize("even_split", [False, True])
@pytest.mark.parametrize(("old", "new", "steps"), [(2, 3, [2, 2]), (4, 2, [1, 1, 1, 1]), (3, 1, [3, 3, 3])])
def test_another_world_size_delivers_the_rest_of_the_epoch_once(source, order, even_split, old, new, steps):
    pixels = reference_pixels(source, order)
    states, delivered = interrupt(source, old, order, even_split, steps)
    before = [label for label, _ in delivered]
    shares = []
    for rank in range(new):
        loader = make(source, rank, new, order, even_split)
        loader.load_state_dict(states)
        rest = take(loader, None)
        shares.append(len(rest))
        delivered += rest
        after = loader.state_dict()
        assert (after["epoch"], after["position"], after["splits"]) == (EPOCH + 1, 0, [])
        # The next epoch is this world size's own.
        fresh = make(source, rank, new, order, even_split)
        fresh.set_epoch(EPOCH + 1)
        assert [y for y, _ in take(loader, None)] == [y for y, _ in take(fresh, None)]
    labels = [label for label, _ in delivered]
    assert len(labels) == len(set(labels)), "a sample was delivered twice"
    for label, image in delivered:
        assert torch.equal(image, pixels[label]), f"sample {label}: other pixels than the uninterrupted run's"
    epoch = visited(old, order, even_split)  # what the interrupted epoch visits, on the old world size
    left = len(epoch) - len(before)
    if even_split:
        assert len(set(shares)) == 1, f"unequal shares {shares}: ranks would run different numbers of steps"
        assert set(labels) <= epoch and len(labels) == len(epoch) - left % new
    else:
        assert sorted(labels) == list(range(N))
        assert max(shares) - min(shares) <= 1


@pytest.mark.parametrize("order", ["sample", "shards"])
@pytest.mark.parametrize("even_split", [False, True])
def test_restarts_on_four_then_two_then_three_then_one_rank(source, order, even_split):
    """Several restarts within one epoch: each world's states (taken mid-way through a resumed epoch) resume
    the next. Ranks at different positions (one ahead) are fine too."""
    states, delivered = interrupt(source, 4, order, even_split, [2, 1, 2, 1])
    lost = 0
    for world, steps in ((2, [1, 2]), (3, [1, 1, 1]), (1, [None])):
        merged = chute.merge_state_dicts(states)
        lost += sum(_native.epoch_shares(N, 1, even_split, [(w, r) for w, r in _splits(merged)])) % world
        next_states = []
        for rank in range(world):
            loader = make(source, rank, world, order, even_split)
            loader.load_state_dict(roundtrip(merged) if rank % 2 else states)  # either form
            delivered += take(loader, steps[rank])
            next_states.append(roundtrip(loader.state_dict()))
        states = next_states
    labels = [label for label, _ in delivered]
    assert len(labels) == len(set(labels))
    if even_split:
        assert set(labels) <= visited(4, order, True)
        assert len(labels) == len(visited(4, order, True)) - lost
    else:
        assert sorted(labels) == list(range(N))
    pixels = reference_pixels(source, order)
    assert all(torch.equal(image, pixels[label]) for label, image in delivered)


def _splits(merged: dict) -> list:
    return [(s["world_size"], s["received"]) for s in merged["splits"]] + [(merged["world_size"], merged["received"])]


@pytest.mark.parametrize("order", ["sample", "shards"])
def test_every_ranks_states_on_the_same_world_continue_each_rank_exactly(source, order):
    """The same world size: each rank goes on where it was, byte for byte what it would have delivered."""
    states, _ = interrupt(source, 2, order, False, [1, 3])  # ranks at different positions
    for rank in range(2):
        uninterrupted = make(source, rank, 2, order)
        uninterrupted.set_epoch(EPOCH)
        expected = take(uninterrupted, None)[states[rank]["position"] :]
        for given in (states, chute.merge_state_dicts(states), states[rank]):
            loader = make(source, rank, 2, order)
            loader.load_state_dict(given)
            got = take(loader, None)
            assert [y for y, _ in got] == [y for y, _ in expected]
            assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, expected))


def test_ranks_on_either_side_of_an_epoch_end_merge(source):
    """One rank received its whole epoch (its state is at the next epoch's start), the other not: merged,
    the finished rank counts as having received its share; all finished: the next epoch, whole."""
    a = make(source, 0, 2)
    a.set_epoch(EPOCH)
    take(a, None)
    b = make(source, 1, 2)
    b.set_epoch(EPOCH)
    b_epoch = iter(b)
    for _ in range(5):
        next(b_epoch)
    states = [a.state_dict(), b.state_dict()]
    assert (states[0]["epoch"], states[1]["epoch"]) == (EPOCH + 1, EPOCH)
    merged = chute.merge_state_dicts(states)
    assert merged["epoch"] == EPOCH and merged["received"] == [a.num_samples, 20]
    assert json.loads(json.dumps(merged)) == merged
    one = make(source, 0, 1)
    one.load_state_dict(states)
    rest = [y for y, _ in take(one, None)]
    assert len(rest) == b.num_samples - 20
    for _ in b_epoch:
        pass
    done = chute.merge_state_dicts([a.state_dict(), b.state_dict()])
    assert (done["epoch"], done["received"], done["splits"]) == (EPOCH + 1, [0, 0], [])
    three = make(source, 2, 3)
    three.load_state_dict(done)
    fresh = make(source, 2, 3)
    fresh.set_epoch(EPOCH + 1)
    assert [y for y, _ in take(three, None)] == [y for y, _ in take(fresh, None)]


def test_resumed_epochs_go_through_device_delivery(source):
    """The rest of an epoch runs through GPU delivery (device='sim': the DeviceLoader, simulated) as through
    the host loader: the same batches."""
    states, _ = interrupt(source, 2, "shards", False, [2, 1])
    expected = make(source, 0, 3, "shards")
    expected.load_state_dict(states)
    want = take(expected, None)
    loader = make(source, 0, 3, "shards", device="sim")
    loader.load_state_dict(states)
    got = take(loader, None)
    assert [y for y, _ in got] == [y for y, _ in want]
    assert all(torch.equal(a.cpu(), b) for (_, a), (_, b) in zip(got, want))
    assert loader.state_dict()["epoch"] == EPOCH + 1


def test_a_one_rank_state_resumes_any_world_size(source):
    states, delivered = interrupt(source, 1, "sample", False, [5])
    labels = [y for y, _ in delivered]
    for rank in range(2):
        loader = make(source, rank, 2)
        loader.load_state_dict(states[0])
        labels += [y for y, _ in take(loader, None)]
    assert sorted(labels) == list(range(N))


# ---- formats -----------------------------------------------------------------------------------------


def test_a_format_1_state_still_loads(source):
    """A checkpoint written by chute before elastic resume (format 1, no splits) resumes as it did."""
    v1 = json.loads(
        '{"format_version": 1, "epoch": 1, "position": 8, "seed": 3, "shuffle": true, "drop_last": false, '
        '"batch_size": 4, "dataset_size": 59, "rank": 0, "world_size": 1, "even_split": false, '
        '"order": "sample", "shard_window": 8}'
    )
    loader = make(source, 0, 1)
    loader.load_state_dict(v1)
    uninterrupted = make(source, 0, 1)
    uninterrupted.set_epoch(1)
    assert [y for y, _ in take(loader, None)] == [y for y, _ in take(uninterrupted, None)][8:]
    remote_v1 = {k: v for k, v in v1.items() if k not in ("order", "shard_window")}  # RemoteLoader's
    make(source, 0, 1).load_state_dict(remote_v1)
    assert make(source, 0, 1).state_dict()["format_version"] == 2


# ---- refusals ----------------------------------------------------------------------------------------


def _state(source, **changes) -> dict:
    loader = make(source, 0, 2)
    loader.set_epoch(EPOCH)
    take(loader, 1)
    return {**roundtrip(loader.state_dict()), **changes}


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"epoch": -5}, ValueError, r"epoch is -5, not an integer >= 0"),
        ({"position": 4.0}, ValueError, r"position is 4.0, not an integer >= 0"),
        ({"position": True}, ValueError, r"position is True, not an integer >= 0"),
        ({"position": 31}, ValueError, r"position 31 is outside this rank's epoch of 30 samples"),
        ({"rank": 1}, ValueError, r"the state is rank 1's, this loader is rank 0 \(of 2\)"),
        ({"rank": 2}, ValueError, r"rank 2 is outside world_size=2"),
        (
            {"world_size": 3, "rank": 0},
            ValueError,
            r"rank 0 of world_size=3, this loader has world_size=2: .*every old",
        ),
        ({"format_version": 99}, ValueError, r"unsupported loader state format_version 99"),
        ({"format_version": None}, ValueError, r"format_version None"),
        ({"seed": 4}, ValueError, r"seed=4, this loader has seed=3"),
        ({"batch_size": 8}, ValueError, r"batch_size=8, this loader has batch_size=4"),
        ({"dataset_size": 60}, ValueError, r"dataset of 60 samples, this source has 59"),
        ({"shuffle": "yes"}, ValueError, r"shuffle is 'yes', not True or False"),
        ({"order": "random"}, ValueError, r"order is 'random', not 'sample' or 'shards'"),
        ({"splits": {"a": 1}}, ValueError, r"splits is \{'a': 1\}, not a list"),
        ({"splits": [{"world_size": 2}]}, ValueError, r"splits\[0\] is .* not \{'world_size'"),
        ({"splits": [{"world_size": 2, "received": [99, 0]}]}, ValueError, r"rank 0 received 99 samples, its share"),
        ({"received": [1, 2, 3]}, ValueError, r"received is \[1, 2, 3\], not one count >= 0 per rank of 2"),
    ],
)
def test_malformed_or_mismatched_states_are_refused_by_name(source, change, error, message):
    loader = make(source, 0, 2)
    with pytest.raises(error, match=message):
        loader.load_state_dict(_state(source, **change))


def test_what_is_no_state_is_a_type_error(source):
    loader = make(source, 0, 2)
    with pytest.raises(TypeError, match=r"the state is None, not a loader state"):
        loader.load_state_dict(None)
    with pytest.raises(TypeError, match=r"is a str, not a loader state"):
        loader.load_state_dict("state.json")
    with pytest.raises(ValueError, match=r"has no 'epoch': it is not a chute loader state"):
        loader.load_state_dict({"format_version": 2})
    with pytest.raises(ValueError, match=r"non-empty list"):
        loader.load_state_dict([])


def test_lists_that_are_not_one_jobs_ranks_are_refused(source):
    states, _ = interrupt(source, 2, "sample", False, [1, 1])
    loader = make(source, 0, 3)
    with pytest.raises(ValueError, match=r"ranks \[0, 0\] of world_size=2: .*missing: \[1\]; given twice: \[0\]"):
        loader.load_state_dict([states[0], states[0]])
    with pytest.raises(ValueError, match=r"ranks \[1\] of world_size=2: .*missing: \[0\]"):
        loader.load_state_dict(states[1:])
    with pytest.raises(ValueError, match=r"the states differ in seed: 3 \(rank 0\) and 4 \(rank 1"):
        loader.load_state_dict([states[0], {**states[1], "seed": 4}])
    with pytest.raises(ValueError, match=r"rank 1 is at epoch 3 position 0 while rank 0 is in epoch 1"):
        loader.load_state_dict([states[0], {**states[1], "epoch": 3, "position": 0}])
    with pytest.raises(ValueError, match=r"rank 1 is at epoch 2 position 4 while rank 0 is in epoch 1"):
        loader.load_state_dict([states[0], {**states[1], "epoch": 2}])
    with pytest.raises(ValueError, match=r"both in epoch 1 but state different earlier splits"):
        loader.load_state_dict([states[0], {**states[1], "splits": [{"world_size": 1, "received": [3]}]}])
    with pytest.raises(ValueError, match=r"merged state is every rank's already"):
        loader.load_state_dict([chute.merge_state_dicts(states), states[0]])
    with pytest.raises(ValueError, match=r"rank 1's position 31 is outside its epoch of 29 samples"):
        loader.load_state_dict([states[0], {**states[1], "position": 31}])


# ---- torchrun ----------------------------------------------------------------------------------------


def test_torchrun_restarts_on_four_two_three_then_one_rank(source, tmp_path):
    """A job under torchrun saves every rank's state in its checkpoint (all_gather_object, written by rank 0)
    and is restarted on 4, then 2, then 3, then 1 process: each run loads the checkpoint, delivers part of
    the epoch and checkpoints again; the last checks every sample was delivered once (elastic_child.py)."""
    tars = sorted(str(p) for p in Path(source().paths[0]).parent.glob("*.tar"))
    env = dict(os.environ, PYTHONPATH=str(Path(chute.__file__).parents[1]), OMP_NUM_THREADS="1")
    checkpoint = tmp_path / "checkpoint.json"
    for world, steps in ((4, 2), (2, 1), (3, 1), (1, 0)):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={world}",
                str(Path(__file__).with_name("elastic_child.py")),
                str(checkpoint),
                str(steps),
                *tars,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert run.stdout.count("every sample once") == 2 and run.stdout.count("all but") == 2, run.stdout
