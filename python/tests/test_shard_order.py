"""The shard-window order (order="shards"): exact per epoch, deterministic, resumable, local to its shards,
and mixing as the hypergeometric law says; the sample order's mixing against the same law (docs/ORDER.md).

Every sample's label is its own number, so a batch's labels say which samples (and which shards) it holds.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from shard_tars import write_tars
from support.remote_data import run

import chute
from chute import _native

PER_SHARD, SHARDS = 32, 32  # the mixing dataset: 32 tars of 32 samples, sample i in shard i // 32
UNEVEN = [7, 3, 12, 1, 9, 0, 5, 8, 2, 11, 1]  # 59 samples; an empty tar among them


@pytest.fixture(scope="module")
def mixing_tars(tmp_path_factory) -> list[str]:
    return write_tars(tmp_path_factory.mktemp("mixing"), [PER_SHARD] * SHARDS)


@pytest.fixture(scope="module")
def uneven(tmp_path_factory) -> dict:
    """The uneven shards as tar files and packed with `chute pack` into many small shards."""
    root = tmp_path_factory.mktemp("uneven")
    tars = write_tars(root / "tars", UNEVEN)
    cache = root / "cache"
    summary = chute.pack(chute.TarDataset(tars, cache_dir=cache), root / "packed", shard_size=4096, num_threads=1)
    assert summary.samples == sum(UNEVEN) and summary.shards >= 8
    return {
        "tar": lambda: chute.TarDataset(tars, cache_dir=cache),
        "packed": lambda: chute.open(root / "packed"),
    }


def labels_of(batches) -> list[int]:
    return [int(v) for _, y in batches for v in y]


def make(source, **kwargs) -> chute.Loader:
    kwargs.setdefault("transforms", [chute.CenterCrop(16)])
    kwargs.setdefault("num_threads", 2)
    return chute.Loader(source, **kwargs)


# ---- sources tell their shards ------------------------------------------------------------------------


def test_sources_tell_their_shards(uneven, tiny_folder):
    assert list(uneven["tar"]()._native.shard_sizes()) == UNEVEN  # one tar, one shard, the empty one too
    packed = uneven["packed"]()
    sizes = list(packed._native.shard_sizes())
    assert sum(sizes) == len(packed) and len(sizes) >= 8
    assert list(chute.ImageFolder(tiny_folder)._native.shard_sizes()) == []


# ---- exactness --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tar", "packed"])
def test_batches_are_the_native_order_and_fixed_by_seed_and_epoch(uneven, kind):
    source = uneven[kind]()
    kwargs = dict(batch_size=5, shuffle=True, seed=11, order="shards", shard_window=3)
    a = run(make(source, **kwargs), epochs=(0, 1))
    b = run(make(source, **kwargs, prefetch=1), epochs=(0, 1))
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    n = len(source)
    sizes = list(source._native.shard_sizes())
    for epoch, got in ((0, labels_of(a)[:n]), (1, labels_of(a)[n:])):
        want = _native.epoch_order(n, True, 11, epoch, shard_sizes=sizes, shard_window=3)
        assert got == want.tolist()  # labels are sample numbers, and the packed order keeps the tar order
        assert sorted(got) == list(range(n))
    assert labels_of(a)[:n] != labels_of(a)[n:]  # epochs differ
    other = labels_of(run(make(source, **{**kwargs, "seed": 12})))
    assert other != labels_of(a)[:n] and sorted(other) == list(range(n))


@pytest.mark.parametrize("kind", ["tar", "packed"])
@pytest.mark.parametrize("even_split", [True, False])
def test_two_ranks_visit_every_sample_once(uneven, kind, even_split):
    source = uneven[kind]()
    n = len(source)  # 59: odd
    for epoch in (0, 3):
        seen = []
        for rank in (0, 1):
            loader = make(
                source,
                batch_size=4,
                shuffle=True,
                seed=2,
                order="shards",
                shard_window=2,
                rank=rank,
                world_size=2,
                even_split=even_split,
            )
            got = labels_of(run(loader, epochs=(epoch,)))
            assert len(got) == loader.num_samples == (n // 2 if even_split else n // 2 + (rank < n % 2))
            seen.append(got)
        whole = _native.epoch_order(n, True, 2, epoch, shard_sizes=list(source._native.shard_sizes()), shard_window=2)
        assert seen[0] + seen[1] == whole.tolist()[: len(seen[0]) + len(seen[1])]  # contiguous blocks
        assert len(set(seen[0]) | set(seen[1])) == len(seen[0]) + len(seen[1])
        assert len(seen[0]) + len(seen[1]) == (n - n % 2 if even_split else n)


def test_torchrun_ranks_share_the_epoch_exactly(uneven, tmp_path):
    """Two processes under torchrun, ranks from torch.distributed: disjoint shares that cover the epoch."""
    tars = uneven["tar"]().paths
    script = tmp_path / "ranks.py"
    script.write_text(
        textwrap.dedent("""
        import sys, torch.distributed as dist, chute
        from chute import _native
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        source = chute.TarDataset(sys.argv[2:], cache_dir=sys.argv[1])
        for even in (True, False):
            loader = chute.Loader(source, batch_size=4, shuffle=True, seed=9, order="shards", shard_window=2,
                                  even_split=even, transforms=[chute.CenterCrop(16)], num_threads=1)
            mine = [int(v) for _, y in loader for v in y]
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
            if rank == 0:
                whole = _native.epoch_order(len(source), True, 9, 0, shard_sizes=list(source._native.shard_sizes()),
                                            shard_window=2).tolist()
                joined = sum(everyone, [])
                assert joined == whole[: len(joined)], "rank blocks follow each other in the global order"
                assert len(set(joined)) == len(joined) == (58 if even else 59), (even, len(joined))
                print("ok", even, [len(e) for e in everyone])
        dist.destroy_process_group()
    """)
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    result = subprocess.run(command + [str(tmp_path / "cache"), *tars], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok True [29, 29]" in result.stdout and "ok False [30, 29]" in result.stdout


def test_ranks_read_about_half_the_shards_each(mixing_tars):
    source = chute.TarDataset(mixing_tars)
    shards = []
    for rank in (0, 1):
        got = labels_of(
            run(make(source, batch_size=64, shuffle=True, order="shards", shard_window=2, rank=rank, world_size=2))
        )
        shards.append({i // PER_SHARD for i in got})
    # 32 shards: 16 each; a window straddling the ranks' boundary may be shared (at most its 2 shards).
    assert all(16 <= len(s) <= 18 for s in shards), [len(s) for s in shards]
    assert len(shards[0] & shards[1]) <= 2
    sample = labels_of(run(make(source, batch_size=64, shuffle=True, rank=0, world_size=2)))
    assert len({i // PER_SHARD for i in sample}) == SHARDS  # the sample order reads every shard on every rank


def test_without_shuffle_the_shard_order_is_the_source_order(uneven):
    source = uneven["packed"]()
    assert labels_of(run(make(source, batch_size=8, order="shards"))) == list(range(len(source)))
    rank1 = make(source, batch_size=8, order="shards", rank=1, world_size=2)
    assert labels_of(run(rank1)) == list(range(29, 58))  # the second contiguous block


@pytest.mark.parametrize("kind", ["tar", "packed"])
def test_resume_mid_epoch_is_exact(uneven, kind):
    source = uneven[kind]()
    kwargs = dict(batch_size=4, shuffle=True, seed=5, order="shards", shard_window=3, rank=1, world_size=2)
    reference = run(make(source, **kwargs), epochs=(1, 2))
    first = make(source, **kwargs)
    first.set_epoch(1)
    it = iter(first)
    head = [(x.clone(), y.clone()) for _, (x, y) in zip(range(3), it)]
    state = first.state_dict()
    first.close()
    assert state["order"] == "shards" and state["shard_window"] == 3 and state["position"] == 12
    second = make(source, **{**kwargs, "num_threads": 1})
    second.load_state_dict(state)
    tail = [(x.clone(), y.clone()) for x, y in second]
    tail += run(second, epochs=(2,))
    assert len(head) + len(tail) == len(reference)
    for (xa, ya), (xb, yb) in zip(head + tail, reference):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_load_state_dict_refuses_another_order_or_window(uneven):
    source = uneven["tar"]()
    shards4 = make(source, batch_size=4, shuffle=True, order="shards", shard_window=4)
    state = shards4.state_dict()
    with pytest.raises(ValueError, match=r"shard_window=4, this loader has shard_window=8"):
        make(source, batch_size=4, shuffle=True, order="shards").load_state_dict(state)
    sample = make(source, batch_size=4, shuffle=True)
    with pytest.raises(ValueError, match=r"order='shards', this loader has order='sample'"):
        sample.load_state_dict(state)
    with pytest.raises(ValueError, match=r"order='sample', this loader has order='shards'"):
        shards4.load_state_dict(sample.state_dict())
    # A state without `order` (chute.ray.RemoteLoader's) was taken in the sample order.
    legacy = {k: v for k, v in sample.state_dict().items() if k not in ("order", "shard_window")}
    sample.load_state_dict(legacy)
    with pytest.raises(ValueError, match=r"order='sample', this loader has order='shards'"):
        shards4.load_state_dict(legacy)
    shards4.load_state_dict(state)  # its own state loads


def test_bad_order_arguments_are_named(tiny_folder, uneven):
    with pytest.raises(ValueError, match=r"order='shards' .* this ImageFolder is not stored in shards"):
        make(chute.ImageFolder(tiny_folder), batch_size=2, order="shards")
    with pytest.raises(ValueError, match=r"order must be 'sample' .* or 'shards' .*, got 'shard'"):
        make(uneven["tar"](), batch_size=2, order="shard")
    with pytest.raises(ValueError, match=r"shard_window must be an int in \[1, 2\*\*63 - 1\], got 0"):
        make(uneven["tar"](), batch_size=2, order="shards", shard_window=0)
    with pytest.raises(TypeError, match=r"shard_window must be an int"):
        make(uneven["tar"](), batch_size=2, order="shards", shard_window=2.0)
    with pytest.raises(ValueError, match=r"shard_sizes add up to 3 samples, dataset_size is 4"):
        _native.epoch_order(4, True, 0, 0, shard_sizes=[1, 2])
    with pytest.raises(ValueError, match=r"shard 1 has a negative size"):
        _native.epoch_order(1, True, 0, 0, shard_sizes=[2, -1])


# ---- mixing -------------------------------------------------------------------------------------------


def distinct_law(population: int, groups: int, draws: int) -> tuple[float, float]:
    """Mean and standard deviation of the number of distinct groups in `draws` samples taken without
    replacement from `population` samples split evenly into `groups` groups (hypergeometric indicators)."""
    size = population // groups
    p_out = math.comb(population - size, draws) / math.comb(population, draws)
    p_both_out = math.comb(population - 2 * size, draws) / math.comb(population, draws)
    mean = groups * (1 - p_out)
    var = groups * p_out * (1 - p_out) + groups * (groups - 1) * (p_both_out - p_out**2)
    return mean, math.sqrt(var)


def distinct_shards_per_batch(batches) -> list[int]:
    return [len({int(v) // PER_SHARD for v in y}) for _, y in batches]


EPOCHS = (0, 1, 2, 3)


def test_shard_window_mixing_matches_the_hypergeometric_expectation(mixing_tars):
    """K=8 shards of 32 per window, batches of 32: a window is 8 batches exactly, so each batch is a
    uniformly shuffled 32 of its window's 256 samples. Tolerance: 5 standard errors of the mean over the
    128 batches (treated as independent; batches of one window are negatively correlated, which only
    narrows the spread)."""
    source = chute.TarDataset(mixing_tars)
    batches = run(make(source, batch_size=32, shuffle=True, seed=0, order="shards", shard_window=8), EPOCHS)
    per_batch = distinct_shards_per_batch(batches)
    assert len(per_batch) == 32 * len(EPOCHS)
    mean, sd = distinct_law(8 * PER_SHARD, 8, 32)  # 7.92, 0.28
    assert max(per_batch) <= 8 and min(per_batch) >= 5  # never more than K; P(<= 4 shards) < 1e-9
    assert abs(np.mean(per_batch) - mean) < 5 * sd / math.sqrt(len(per_batch)), (np.mean(per_batch), mean)
    # Consecutive windows hold disjoint shards: batch b's shards all lie in window b // 8's.
    for e in range(len(EPOCHS)):
        for w in range(4):
            shards = set()
            for _, y in batches[e * 32 + w * 8 : e * 32 + (w + 1) * 8]:
                shards |= {int(v) // PER_SHARD for v in y}
            assert len(shards) == 8
    # Epoch to epoch, the windows are new groups of shards.
    first = {frozenset(int(v) // PER_SHARD for _, y in batches[w * 8 : (w + 1) * 8] for v in y) for w in range(4)}
    second = {
        frozenset(int(v) // PER_SHARD for _, y in batches[32 + w * 8 : 32 + (w + 1) * 8] for v in y) for w in range(4)
    }
    assert first != second


def test_sample_order_mixing_matches_the_hypergeometric_expectation(mixing_tars):
    """The fully random order: each batch of 32 is (up to the Feistel construction) a uniform 32 of all
    1024 samples, from 32 shards. Same tolerance rule as above."""
    source = chute.TarDataset(mixing_tars)
    per_batch = distinct_shards_per_batch(run(make(source, batch_size=32, shuffle=True, seed=0), EPOCHS))
    mean, sd = distinct_law(SHARDS * PER_SHARD, SHARDS, 32)  # 20.60, 1.76
    assert abs(np.mean(per_batch) - mean) < 5 * sd / math.sqrt(len(per_batch)), (np.mean(per_batch), mean)


def test_window_shuffle_is_unbiased_over_many_seeds():
    """The same law over 400 seeds (12,800 batches; the order alone, through chute._native.epoch_order,
    which is chute.Loader's). Tolerance: 5 standard errors of the mean (0.012) and 0.02 on the standard
    deviation. A 4-round Feistel network on these 256-sample windows fails it (mean 7.894, sd 0.318): the
    shard-window order's permutations take 8 rounds (docs/ORDER.md)."""
    per_batch = []
    for seed in range(400):
        order = _native.epoch_order(SHARDS * PER_SHARD, True, seed, 0, shard_sizes=[PER_SHARD] * SHARDS, shard_window=8)
        per_batch += [len(np.unique(row)) for row in (order // PER_SHARD).reshape(-1, 32)]
    mean, sd = distinct_law(8 * PER_SHARD, 8, 32)
    assert abs(np.mean(per_batch) - mean) < 5 * sd / math.sqrt(len(per_batch)), (np.mean(per_batch), mean)
    assert abs(np.std(per_batch) - sd) < 0.02, (np.std(per_batch), sd)


def test_two_shards_share_a_window_with_the_stated_probability():
    """32 shards, K=8: every pair of shards shares a window with probability (K - 1) / (S - 1) = 7/31 per
    epoch (the shard order is a uniform permutation up to the Feistel construction), and independently
    from one epoch to the next (both epochs: p**2). Over 4,000 seeds; tolerance 4.5 standard errors for
    each of the 496 pairs, 5 for the epoch-to-epoch mean."""
    shards, k, seeds = 32, 8, 4000

    def same_window(seed: int, epoch: int) -> np.ndarray:
        order = _native.epoch_order(shards, True, seed, epoch, shard_sizes=[1] * shards, shard_window=k)
        window = np.empty(shards, int)
        window[order] = np.arange(shards) // k
        return window[:, None] == window[None, :]

    pairs = ~np.eye(shards, dtype=bool)
    together, both = np.zeros((shards, shards)), []
    for seed in range(seeds):
        first, second = same_window(seed, 0), same_window(seed, 1)
        together += first
        both.append((first & second)[pairs].mean())
    p = (k - 1) / (shards - 1)
    rate = together[pairs] / seeds
    assert np.abs(rate - p).max() < 4.5 * math.sqrt(p * (1 - p) / seeds), (rate.min(), rate.max(), p)
    assert abs(np.mean(both) - p * p) < 5 * np.std(both) / math.sqrt(seeds), (np.mean(both), p * p)
