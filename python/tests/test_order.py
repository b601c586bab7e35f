"""Order you can trust: sequential and shuffled epochs, distributed shares, and exact mid-epoch resume."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import BatchSampler, SequentialSampler

import chute

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def one_per_class(tmp_path_factory) -> Path:
    """23 images, each in a class of its own, so a label names its sample."""
    root = tmp_path_factory.mktemp("one_per_class")
    rng = np.random.default_rng(0)
    for i in range(23):
        (root / f"c{i:02d}").mkdir()
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / f"c{i:02d}" / "x.jpg")
    return root


def labels_of(loader) -> list[list[int]]:
    return [y.tolist() for _, y in loader]


@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_batches_match_torch_samplers(one_per_class, drop_last):
    loader = chute.Loader(
        one_per_class, batch_size=5, drop_last=drop_last, transforms=[chute.CenterCrop(16)], rank=0, world_size=1
    )
    expected = list(BatchSampler(SequentialSampler(range(23)), batch_size=5, drop_last=drop_last))
    assert labels_of(loader) == expected
    assert len(loader) == len(expected)


def test_shuffled_epochs_are_permutations_that_change_per_epoch(one_per_class):
    loader = chute.Loader(
        one_per_class, batch_size=4, shuffle=True, transforms=[chute.CenterCrop(16)], rank=0, world_size=1
    )
    epochs = [sum(labels_of(loader), []) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(23))
    assert epochs[0] != epochs[1] != epochs[2]


def run(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("cut", [0, 1, 3, 6])
def test_resume_mid_epoch_yields_exactly_the_rest(folder, cut):
    kwargs = dict(
        batch_size=4,
        shuffle=True,
        seed=7,
        dtype=torch.float32,
        rank=0,
        world_size=1,
        transforms=[chute.RandomResizedCrop(32), chute.RandomHorizontalFlip(), chute.Normalize(MEAN, STD)],
    )
    reference = chute.Loader(folder, num_threads=2, **kwargs)
    run(reference)  # epoch 0
    expected = run(reference)  # epoch 1, uninterrupted

    interrupted = chute.Loader(folder, num_threads=4, prefetch=6, **kwargs)
    run(interrupted)
    it = iter(interrupted)
    head = [(x.clone(), y.clone()) for _, (x, y) in zip(range(cut), it)]
    state = json.loads(json.dumps(interrupted.state_dict()))  # taken while 6 batches are prefetched
    interrupted.close()

    resumed = chute.Loader(folder, num_threads=1, **kwargs)
    resumed.load_state_dict(state)
    tail = run(resumed)
    got = head + tail
    assert len(got) == len(expected)
    for (a, ya), (b, yb) in zip(got, expected):
        assert torch.equal(ya, yb) and torch.equal(a, b)
    assert resumed.state_dict()["epoch"] == 2  # the next iteration is a new epoch
    assert len(run(resumed)) == len(expected)


def test_state_at_epoch_end_and_before_any_iteration(folder):
    loader = chute.Loader(folder, batch_size=36, transforms=[chute.CenterCrop(16)], rank=0, world_size=1)
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["position"] == 0
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)  # the only batch was delivered: epoch 0 is done


def test_state_format_is_pinned(folder):
    """The serialised state, key order included (format 2: `splits`, the earlier splits of an epoch resumed on
    another number of ranks; chute.ray.RemoteLoader writes the same). Format 1 states still load
    (test_elastic.py::test_a_format_1_state_still_loads)."""
    loader = chute.Loader(
        folder, batch_size=4, shuffle=True, seed=7, transforms=[chute.CenterCrop(16)], rank=0, world_size=1
    )
    it = iter(loader)
    next(it)
    assert json.dumps(loader.state_dict()) == (
        '{"format_version": 2, "epoch": 0, "position": 4, "seed": 7, "shuffle": true, "drop_last": false, '
        '"batch_size": 4, "dataset_size": 36, "rank": 0, "world_size": 1, "even_split": true, '
        '"order": "sample", "shard_window": null, "splits": []}'
    )


def test_bad_states_and_arguments_are_clear_errors(folder, one_per_class):
    loader = chute.Loader(folder, batch_size=4, transforms=[chute.CenterCrop(16)], rank=0, world_size=1)
    state = loader.state_dict()
    other = chute.Loader(one_per_class, batch_size=4, transforms=[chute.CenterCrop(16)], rank=0, world_size=1)
    with pytest.raises(ValueError, match="dataset of 36 samples"):
        other.load_state_dict(state)
    # One rank's state of two resumes neither rank of three (all of them do: test_elastic.py).
    half = chute.Loader(folder, batch_size=4, transforms=[chute.CenterCrop(16)], rank=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="world_size=2, this loader has world_size=3"):
        chute.Loader(folder, batch_size=4, transforms=[chute.CenterCrop(16)], rank=0, world_size=3).load_state_dict(
            half
        )
    with pytest.raises(ValueError, match="seed"):
        chute.Loader(
            folder, batch_size=4, seed=1, transforms=[chute.CenterCrop(16)], rank=0, world_size=1
        ).load_state_dict(state)
    with pytest.raises(ValueError, match="format_version"):
        loader.load_state_dict({**state, "format_version": 99})
    with pytest.raises(ValueError, match="rank must be in"):
        chute.Loader(folder, batch_size=4, transforms=[chute.CenterCrop(16)], rank=2, world_size=2)
    with pytest.raises(ValueError, match="both rank and world_size"):
        chute.Loader(folder, batch_size=4, transforms=[chute.CenterCrop(16)], rank=0)


def test_rank_and_world_size_come_from_torchrun_environment(folder, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = chute.Loader(folder, batch_size=4, transforms=[chute.CenterCrop(16)])
    assert (loader.rank, loader.world_size, loader.num_samples) == (1, 3, 12)


def test_torchrun_ranks_are_disjoint_equal_and_exact_in_eval_mode(one_per_class, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(
        textwrap.dedent("""
        import sys, torch, torch.distributed as dist, chute
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        for even in (True, False):
            loader = chute.Loader(sys.argv[1], batch_size=3, shuffle=True, seed=5, even_split=even,
                                  transforms=[chute.CenterCrop(16)], num_threads=1)
            assert (loader.rank, loader.world_size) == (rank, world)
            labels = [y.tolist() for _, y in loader]
            mine = sum(labels, [])
            everyone = [None] * world
            dist.all_gather_object(everyone, (len(labels), mine))
            if rank == 0:
                counts = [c for c, _ in everyone]
                samples = sum((s for _, s in everyone), [])
                assert len(samples) == len(set(samples)), "ranks overlap"
                if even:
                    assert counts == [counts[0]] * world, counts
                    assert len(samples) == 23 - 23 % world
                else:
                    assert sorted(samples) == list(range(23)), "exact mode must visit every sample once"
                print("ok", even, counts, len(samples))
        dist.destroy_process_group()
    """)
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            str(one_per_class),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok True [4, 4] 22" in result.stdout
    assert "ok False [4, 4] 23" in result.stdout
