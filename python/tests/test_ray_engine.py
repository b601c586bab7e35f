"""chute.ray.RemoteLoader as a door over chute's one engine description, on a real local Ray cluster: a bad
sample under either error policy (the same batches as chute.Loader's, batch for batch, and the same
skipped-sample report), the shard-window order over remote shards served by nginx on loopback, and the
engine's own words about the options (a lowered prefetch, a max_memory that cannot hold a batch)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("ray", reason="Ray is not installed (pip install 'chute[ray]'): chute.ray is untested")

from conftest import make_folder  # noqa: E402

import chute  # noqa: E402
from chute.bench.loopback import Nginx  # noqa: E402

WAIT_S = 120  # every wait in this file fails the test after this long, never hangs it
BAD = ("class_0/img_002.jpg", "class_1/img_004.jpg", "class_1/img_005.jpg")  # two of them adjacent in the tree


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """An ImageFolder of 22 JPEGs, three of them corrupt (a cut header, garbage, a file ending mid-scan)."""
    root = make_folder(tmp_path_factory.mktemp("damaged"), classes=2, per_class=11, seed=5)
    (root / BAD[0]).write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (root / BAD[1]).write_bytes(b"garbage, no image at all")
    whole = (root / BAD[2]).read_bytes()
    (root / BAD[2]).write_bytes(whole[: len(whole) // 3])
    return root


def _kwargs(**extra):
    return dict(batch_size=4, shuffle=True, seed=3, transforms=[chute.RandomResizedCrop(24)], **extra)


def _run(loader) -> list[tuple]:
    """One epoch as ("ok", images, labels, state after it) and ("error", index, path, reason) items."""
    out, it = [], iter(loader)
    while True:
        try:
            images, labels = next(it)
        except StopIteration:
            return out
        except chute.SampleError as e:
            out.append(("error", e.index, e.path, e.reason))
            continue
        out.append(("ok", images.clone(), labels.clone(), loader.state_dict()))


def _same_epochs(expected, got):
    assert [item[0] for item in got] == [item[0] for item in expected]
    for k, (e, g) in enumerate(zip(expected, got)):
        if e[0] == "error":
            assert g == e, k
            continue
        assert torch.equal(e[2], g[2]), f"batch {k}: labels differ"
        assert torch.equal(e[1], g[1]), f"batch {k}: images differ"
        assert g[3] == e[3], f"batch {k}: resume states differ"


def _remote(source, **kw):
    import chute.ray

    return chute.ray.RemoteLoader(source, num_cpus_per_actor=0.5, timeout_s=WAIT_S, **kw)


def test_a_corrupt_file_is_a_sample_error_naming_it_and_the_good_batches_still_arrive(cluster, damaged):
    """on_error='raise': chute.SampleError (index, path, reason) in place of the bad sample's batch, once
    per bad batch, and every good batch after it, as chute.Loader gives them. (The actor once caught an
    exception class that does not exist: one bad JPEG was a RayTaskError(AttributeError), and the good
    batches after it failed too.)"""
    with chute.Loader(str(damaged), num_threads=1, **_kwargs()) as local:
        expected = _run(local)
    errors = [item for item in expected if item[0] == "error"]
    assert len(errors) >= 2 and expected[-1][0] == "ok"  # good batches follow the bad ones
    assert {Path(e[2]).relative_to(damaged).as_posix() for e in errors} <= set(BAD)
    with _remote(str(damaged), num_actors=2, **_kwargs()) as remote:
        got = _run(remote)
        _same_epochs(expected, got)
        assert remote.errors() == []  # 'raise' skips nothing


@pytest.mark.parametrize("drop_last", [False, True])
def test_skip_gives_the_loaders_epoch_batch_for_batch(cluster, damaged, drop_last):
    """on_error='skip': the bad samples left out and each batch filled from the next samples, exactly as
    chute.Loader does (its batches, the same resume state after each, the same skipped-sample report),
    though each actor made only its own batches; a state taken mid-epoch resumes either loader."""
    kw = _kwargs(on_error="skip", drop_last=drop_last)
    with chute.Loader(str(damaged), num_threads=1, **kw) as local:
        expected = _run(local)
        skipped = [(e.index, e.path, e.reason, e.epoch) for e in local.errors()]
    assert len(skipped) == 3 and all(item[0] == "ok" for item in expected)
    with _remote(str(damaged), num_actors=2, **kw) as remote:
        got = _run(remote)
        _same_epochs(expected, got)
        assert [(e.index, e.path, e.reason, e.epoch) for e in remote.errors()] == skipped
        state = expected[1][3]  # after two batches, taken by chute.Loader
        remote.load_state_dict(state)
        rest = _run(remote)
    _same_epochs(expected[2:], rest)


def test_skip_copies_no_batch_of_an_epoch_without_a_bad_sample(cluster, folder, damaged):
    """The re-packing costs nothing when nothing is skipped: every batch is passed on as the object store
    gave it; after a skipped sample the later batches are joined (copied)."""
    with _remote(str(folder), **_kwargs(on_error="skip")) as remote:
        assert sum(len(y) for _, y in remote) == 36
        assert remote.stats()["repacked"] == 0 and remote.stats()["batches"] == 9
    with _remote(str(damaged), **_kwargs(on_error="skip")) as remote:
        assert sum(len(y) for _, y in remote) == 19
        assert remote.stats()["repacked"] > 0


@pytest.fixture(scope="module")
def served(tmp_path_factory, folder):
    """``folder`` packed into many small shards, served over HTTP by nginx on loopback."""
    root = tmp_path_factory.mktemp("served")
    chute.pack(str(folder), str(root / "packed"), shard_size=16384, num_threads=1)
    with Nginx(root) as base:
        yield root / "packed", f"{base}/packed/"


def test_shard_order_on_remote_shards_equals_the_loaders(cluster, served, tmp_path, monkeypatch):
    """order='shards' (with shard_window) through RemoteLoader, its actors reading the shards over HTTP:
    chute.Loader's batches from the local copy, byte for byte, and a state chute.Loader resumes."""
    local_path, url = served
    assert len(list(local_path.glob("*.chute"))) >= 6
    cache = tmp_path / "cache"
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(cache))  # the driver's reads (the index); the actors' below
    kw = _kwargs(order="shards", shard_window=2)
    with chute.Loader(str(local_path), num_threads=1, **kw) as local:
        local.set_epoch(1)
        expected = _run(local)
    actor_env = {"runtime_env": {"env_vars": {"CHUTE_CACHE_DIR": str(cache)}}}
    with _remote(url, num_actors=2, actor_options=actor_env, **kw) as remote:
        assert remote.order == "shards" and len(remote) == len(expected)
        remote.set_epoch(1)
        got = _run(remote)
    _same_epochs(expected, got)
    assert got[0][3]["order"] == "shards" and got[0][3]["shard_window"] == 2
    shutil.rmtree(cache, ignore_errors=True)


def test_the_engines_notices_and_refusals_reach_the_driver(cluster, folder):
    """Each actor's engine is built from the driver's options: a prefetch its max_memory cannot hold is
    lowered with the engine's own warning, and a max_memory below one batch's buffers is the engine's
    ValueError, naming both sizes, raised by the constructor."""
    buffer = 4 * (24 * 24 * 3 + 8)  # a batch of 4 samples of 24 x 24 x 3 bytes, and its labels
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _remote(str(folder), prefetch=50, max_memory=10 * buffer, **_kwargs()) as remote:
            assert sum(len(y) for _, y in remote) == 36
    said = [str(w.message) for w in caught if "prefetch=50" in str(w.message)]
    assert len(said) == 1 and "using prefetch=8" in said[0] and said[0].startswith("chute.ray.RemoteLoader"), said
    with pytest.raises(ValueError, match=r"max_memory of .* holds fewer than 3 batch buffers of"):
        _remote(str(folder), prefetch=1, max_memory=buffer - 1, **_kwargs())
