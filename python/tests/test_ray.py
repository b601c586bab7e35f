"""chute.ray on a real local Ray cluster: RemoteLoader's batches against chute.Loader's (bytes and order),
actors killed mid-epoch, resume, bounded in-flight batches, rank shares; chute.ray.pack against a
single-machine pack, with a task that kills its own worker."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'chute[ray]'): chute.ray is untested")

import chute  # noqa: E402
from chute import _native  # noqa: E402

WAIT_S = 120  # every wait in this file fails the test after this long, never hangs it


def _transforms():
    return [chute.RandomResizedCrop(24), chute.RandomHorizontalFlip()]


def _kwargs(**extra):
    return dict(batch_size=5, shuffle=True, seed=11, transforms=_transforms(), **extra)


def _local(folder, epoch, start_state=None, **extra):
    loader = chute.Loader(str(folder), num_threads=1, **_kwargs(**extra))
    loader.set_epoch(epoch)
    if start_state is not None:
        loader.load_state_dict(start_state)
    with loader:
        return [(i.clone(), y.clone()) for i, y in loader]


def _same(expected, got):
    assert len(expected) == len(got)
    for k, ((ei, el), (gi, gl)) in enumerate(zip(expected, got)):
        assert ei.dtype == gi.dtype and ei.shape == gi.shape and ei.stride() == gi.stride(), k
        assert torch.equal(ei, gi), f"batch {k}: images differ"
        assert torch.equal(el, gl), f"batch {k}: labels differ"


def test_import_chute_does_not_import_ray():
    code = "import sys, chute; sys.exit(1 if 'ray' in sys.modules else 0)"
    env = dict(os.environ, PYTHONPATH=str(Path(chute.__file__).parents[1]))
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=WAIT_S).returncode == 0


def test_chute_ray_without_ray_names_the_extra():
    code = "import sys; sys.modules['ray'] = None\ntry:\n    import chute.ray\nexcept ImportError as e:\n    print(e)\n"
    env = dict(os.environ, PYTHONPATH=str(Path(chute.__file__).parents[1]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert "pip install 'chute[ray]'" in out.stdout, out.stderr


def test_epoch_order_is_the_loaders_sharding():
    full = _native.epoch_order(23, True, 5, 2)
    assert sorted(full.tolist()) == list(range(23))
    ranks = [_native.epoch_order(23, True, 5, 2, r, 3, True) for r in range(3)]
    assert [len(r) for r in ranks] == [7, 7, 7]  # even_split: 23 // 3 each, as chute.Loader
    for r in range(3):
        assert ranks[r].tolist() == full[r:21:3].tolist()
    uneven = [_native.epoch_order(23, True, 5, 2, r, 3, False) for r in range(3)]
    assert sorted(np.concatenate(uneven).tolist()) == list(range(23))
    with pytest.raises(ValueError, match="rank"):
        _native.epoch_order(23, True, 5, 2, 3, 3, True)


def _actor(folder, hook=None):
    """A BatchActor in this process (no Ray): what each actor runs, driven call by call, built from the
    options object the driver ships."""
    from chute import _options
    from chute.ray.actor import BatchActor, from_wire, source_spec

    kw = _kwargs()
    options = _options.build(batch_size=kw["batch_size"], shuffle=True, seed=kw["seed"], num_threads=1).loader
    actor = BatchActor(source_spec(str(folder)), options, kw["transforms"], hook)

    def call(epoch, indices, plan=None):
        status, images, labels, _, skipped = actor.batch(epoch, indices, plan)
        assert status == "ok" and skipped == []
        return from_wire(images, torch.uint8, False).clone(), torch.from_numpy(labels.copy())

    return actor, call


def test_actor_plan_runs_ahead_and_any_call_order_gives_the_same_bytes(folder):
    """The actor's engine runs its plan ahead of the calls; calls that leave the plan (a batch resent from a
    dead actor, plan batches sent elsewhere, the short last batch out of turn) restart it, never change a
    batch's bytes."""
    epoch = 2
    expected = _local(folder, epoch)
    order = _native.epoch_order(36, True, 11, epoch)
    bounds = [order[lo : lo + 5] for lo in range(0, 36, 5)]  # 8 batches, the last one of 1 sample
    actor, call = _actor(folder)
    mine = [0, 2, 4, 6]  # a home share, round-robin over 2 actors
    plan = np.concatenate([bounds[b] for b in mine])
    got = {0: call(epoch, bounds[0], plan)}
    got[2] = call(epoch, bounds[2])
    assert actor.restarts == 0  # the plan, in order: no restart
    got[7] = call(epoch, bounds[7])  # the short last batch, out of turn (its actor died): the plan goes
    got[4] = call(epoch, bounds[4])
    got[1] = call(epoch, bounds[1])  # resent from the other actor
    got[6] = call(epoch, bounds[6])
    assert actor.restarts == 4
    actor2, call2 = _actor(folder)
    got[3] = call2(epoch, bounds[3], np.concatenate([bounds[3], bounds[5]]))
    got[5] = call2(epoch, bounds[5])
    assert actor2.restarts == 0
    actor3, call3 = _actor(folder)  # a plan whose first batches went elsewhere: it skips ahead
    got6 = call3(epoch, bounds[6], np.concatenate([bounds[b] for b in (2, 4, 6)]))
    assert actor3.restarts == 1
    _same(expected, [got[b] for b in range(8)])
    _same([expected[6]], [got6])
    assert actor.made() == 6 and actor2.made() == 2


@pytest.fixture(scope="module")
def remote(cluster, folder):
    import chute.ray

    loader = chute.ray.RemoteLoader(
        str(folder), num_actors=2, num_cpus_per_actor=0.5, max_inflight=3, timeout_s=WAIT_S, **_kwargs()
    )
    yield loader
    loader.close()


def test_same_bytes_and_order_as_local(remote, folder):
    assert len(remote) == len(chute.Loader(str(folder), **_kwargs()))
    for epoch in (0, 1):
        _same(_local(folder, epoch), list(remote))
    assert remote.stats()["batches"] == 2 * len(remote)
    assert len(remote.actor_pids()) == 2


def test_trainer_tensor_is_a_view_of_the_fetched_buffer(remote):
    """torch.from_numpy of what ray.get returns: no copy on the trainer's side. (Ray keeps batches over
    100 KiB in the node's shared-memory object store and maps them; smaller ones, like these, are inlined
    into the trainer's own memory store. Either way a second get returns the same buffer.)"""
    remote.set_epoch(0)
    it = iter(remote)
    images, _ = next(it)
    ref = next(iter(it._pending.values()))[0]
    first = ray.get(ref, timeout=WAIT_S)[1]
    again = ray.get(ref, timeout=WAIT_S)[1]
    assert first.ctypes.data == again.ctypes.data  # one shared buffer, mapped, not copied per get
    assert not first.flags.writeable
    assert torch.from_numpy(first).data_ptr() == first.ctypes.data


def test_resume_is_exact_and_interchangeable_with_loader(remote, folder):
    remote.set_epoch(3)
    it = iter(remote)
    for _ in range(3):
        next(it)
    state = remote.state_dict()
    assert state["epoch"] == 3 and state["position"] == 15
    expected = _local(folder, 3, start_state=state)
    assert len(expected) == len(remote) - 3
    remote.load_state_dict(state)
    _same(expected, list(remote))
    # And the state chute.Loader takes resumes a RemoteLoader the same way.
    local = chute.Loader(str(folder), **_kwargs())
    local.set_epoch(3)
    it = iter(local)
    for _ in range(3):
        next(it)
    # The same format as chute.Loader's, key order included.
    assert list(state.items()) == list(local.state_dict().items())
    remote.load_state_dict(local.state_dict())
    _same(expected, list(remote))
    with pytest.raises(ValueError, match=r"order='shards', this loader has order='sample'"):
        remote.load_state_dict({**local.state_dict(), "order": "shards", "shard_window": 8})  # a shard-order state


def test_slow_consumer_bounds_batches_in_flight(remote):
    """A consumer that stops makes the actors stop after max_inflight batches: none are made ahead beyond."""
    made = lambda: sum(ray.get([a.made.remote() for a in remote._pool.actors], timeout=WAIT_S))  # noqa: E731
    remote.set_epoch(0)
    before = made()
    it = iter(remote)
    next(it)
    next(it)
    pending = [ref for ref, _ in it._pending.values()]
    assert len(pending) == remote.max_inflight
    ready, _ = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)  # the actors run out of work
    assert len(ready) == len(pending)
    assert made() - before == 2 + remote.max_inflight
    assert remote.stats()["max_outstanding"] <= remote.max_inflight


def test_bfloat16_channels_last_normalized_same_bytes(cluster, folder):
    """The dtype (bfloat16 travels as its int16 bits) and the channels-last layout survive the trip."""
    import chute.ray

    extra = dict(dtype=torch.bfloat16, memory_format=torch.channels_last)
    kw = _kwargs(**extra)
    kw["transforms"] = _transforms() + [chute.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    with chute.ray.RemoteLoader(str(folder), num_actors=1, num_cpus_per_actor=0.5, timeout_s=WAIT_S, **kw) as remote:
        got = list(remote)
    with chute.Loader(str(folder), num_threads=1, **kw) as local:
        expected = [(i.clone(memory_format=torch.channels_last), y.clone()) for i, y in local]
    assert got[0][0].is_contiguous(memory_format=torch.channels_last)
    _same(expected, got)


@pytest.mark.parametrize(
    "side, dtype, memory_format, path",
    [
        (24, torch.uint8, torch.contiguous_format, "staged"),  # 8.6 KB batches: Ray inlines them, not shared memory
        (112, torch.uint8, torch.contiguous_format, "registered"),  # 188 KB: the object store, copied from directly
        (112, torch.float32, torch.channels_last, "registered"),  # dtype and Normalize computed on the device
    ],
)
def test_device_sim_delivers_the_cpu_batches_from_the_object_store(cluster, folder, side, dtype, memory_format, path):
    """device='sim': the remote batches reach the simulated device through DeviceSlots with the Loader's
    bytes, and the device finds no copy whose source changed or went before the copy completed (each
    batch's object is held until then; device slots are reused only once released)."""
    import chute.ray

    norm = [chute.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))] if dtype != torch.uint8 else []
    kw = dict(_kwargs(dtype=dtype, memory_format=memory_format), transforms=_transforms()[1:] + norm)
    kw["transforms"] = [chute.RandomResizedCrop(side)] + kw["transforms"]
    expected = []
    with chute.Loader(str(folder), num_threads=1, **kw) as local:
        for _ in range(2):
            expected.append([(i.clone(), y.clone()) for i, y in local])
    with chute.ray.RemoteLoader(
        str(folder), num_actors=2, num_cpus_per_actor=0.5, timeout_s=WAIT_S, device="sim", device_prefetch=2, **kw
    ) as remote:
        assert remote.device == "sim"
        for epoch in range(2):  # two epochs: the device slots cycle many times
            got, kept = [], []
            for i, y in remote:
                got.append((i.clone(), y.clone()))
                kept = (kept + [i])[-1:]  # the consumer keeps the last batch while it takes the next
            del kept, i, y  # the loop variables too: the last batch would hold its device buffer
            assert got[0][0].is_contiguous(memory_format=memory_format)
            _same(expected[epoch], got)
        delivery = remote._delivery
        assert delivery.slots.num_slots == 3
        assert delivery.device.violations == 0, delivery.device.first_violation
        assert delivery.device.copies >= 2 * 2 * len(expected[0])  # images and labels of every batch
        if path == "registered":
            assert delivery.registered_bytes > 0  # the object store's windows, registered once each
        else:
            assert delivery.registered_bytes == 0
        # An iteration left midway: the batches copied ahead are dropped, the next epoch is whole.
        it = iter(remote)
        next(it)
        remote.set_epoch(0)
        _same(expected[0], [(i.clone(), y.clone()) for i, y in remote])
        if dtype == torch.uint8:  # (a float batch is a new tensor: it holds no device buffer)
            # A consumer that keeps every device batch gets an error naming that, never a buffer it holds.
            remote.set_epoch(0)
            it = iter(remote)
            held = [next(it) for _ in range(3)]
            with pytest.raises(RuntimeError, match="device batch buffers are held by batches the consumer"):
                next(it)
            _same(expected[0][:3], [(i.clone(), y.clone()) for i, y in held])
            del held
            remote.set_epoch(0)
            _same(expected[0], [(i.clone(), y.clone()) for i, y in remote])
    assert delivery.device.violations == 0, delivery.device.first_violation


def _blocking_hook(marker_dir: str, block: dict):
    """An actor hook: the first actor to reach batch ``block[epoch]`` (its first source index) writes its
    pid to a marker and stops there until it is killed; a restarted actor finds the marker and goes on."""

    def hook(epoch, indices):
        first = block.get(epoch)
        marker = os.path.join(marker_dir, f"blocked-{epoch}")
        if first is None or int(indices[0]) != first or os.path.exists(marker):
            return
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(3600)  # killed long before this

    return hook


def _wait_for_pid(marker: Path) -> int:
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        assert time.monotonic() < deadline, f"no actor reached the blocking batch ({marker})"
        time.sleep(0.05)
    return int(marker.read_text())


def test_killed_actor_loses_and_duplicates_nothing(cluster, folder, tmp_path):
    import chute.ray

    # Epoch 0: batch 3's actor is killed with SIGKILL (Ray restarts it); epoch 1: batch 2's with
    # ray.kill(no_restart=True) (gone for good: the survivor takes its batches).
    order0, order1 = (_native.epoch_order(36, True, 11, e) for e in (0, 1))
    hook = _blocking_hook(str(tmp_path), {0: int(order0[15]), 1: int(order1[10])})
    loader = chute.ray.RemoteLoader(
        str(folder),
        num_actors=2,
        num_cpus_per_actor=0.5,
        max_inflight=4,
        max_restarts=1,
        timeout_s=WAIT_S,
        _actor_hook=hook,
        **_kwargs(),
    )
    with loader:
        got = []
        it = iter(loader)
        for _ in range(2):
            i, y = next(it)
            got.append((i.clone(), y))
        pid = _wait_for_pid(tmp_path / "blocked-0")
        os.kill(pid, signal.SIGKILL)
        got += [(i.clone(), y) for i, y in it]
        _same(_local(folder, 0), got)
        assert loader.stats()["resubmitted"] >= 1  # the blocked batch, at least, was lost with the actor
        pids = loader.actor_pids()
        assert len(pids) == 2 and pid not in pids  # restarted

        got = []
        it = iter(loader)
        got.append(tuple(t.clone() for t in next(it)))
        _wait_for_pid(tmp_path / "blocked-1")
        blocked = it._pending[2][1]
        ray.kill(loader._pool.actors[blocked], no_restart=True)
        got += [(i.clone(), y) for i, y in it]
        _same(_local(folder, 1), got)
        assert len(loader.actor_pids()) == 1  # the other one is gone for good


def test_two_ranks_get_the_loaders_shares(cluster, folder):
    import chute.ray

    for rank in range(2):
        kw = _kwargs(rank=rank, world_size=2, even_split=False)
        with chute.ray.RemoteLoader(
            str(folder), num_actors=1, num_cpus_per_actor=0.5, timeout_s=WAIT_S, **kw
        ) as remote:
            _same(_local(folder, 0, rank=rank, world_size=2, even_split=False), list(remote))


def test_every_ranks_states_resume_another_world_size(cluster, folder):
    """Two ranks interrupted mid-epoch resume on three: each new rank's RemoteLoader yields chute.Loader's
    batches for that rank (the rest of the epoch, split three ways), and the epoch holds every sample once."""
    import chute.ray

    states, labels = [], []
    for rank in range(2):
        with chute.ray.RemoteLoader(
            str(folder),
            num_actors=1,
            num_cpus_per_actor=0.5,
            timeout_s=WAIT_S,
            **_kwargs(rank=rank, world_size=2, even_split=False),
        ) as remote:
            remote.set_epoch(2)
            it = iter(remote)
            labels += [int(v) for _ in range(2) for v in next(it)[1]]
            states.append(remote.state_dict())
    for rank in range(3):
        kw = _kwargs(rank=rank, world_size=3, even_split=False)
        with chute.ray.RemoteLoader(
            str(folder), num_actors=1, num_cpus_per_actor=0.5, timeout_s=WAIT_S, **kw
        ) as remote:
            remote.load_state_dict(states)
            got = list(remote)
        local = chute.Loader(str(folder), num_threads=1, **kw)
        local.load_state_dict(states)
        _same([(i.clone(), y.clone()) for i, y in local], got)
        labels += [int(v) for _, y in got for v in y]
    # ImageFolder labels are classes (3 x 12): every sample once means each class's 12.
    assert sorted(labels) == sorted(list(range(3)) * 12)


def test_bad_arguments(cluster, folder):
    import chute.ray

    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
        chute.ray.RemoteLoader(str(folder), on_error="ignore")
    with pytest.raises(ValueError, match="order='shards' reads a source shard by shard"):
        chute.ray.RemoteLoader(str(folder), order="shards")  # an ImageFolder: as chute.Loader refuses it
    with pytest.raises(ValueError, match="rank"):
        chute.ray.RemoteLoader(str(folder), rank=2, world_size=2)
    with pytest.raises(TypeError, match="source"):
        chute.ray.RemoteLoader(object())
    with pytest.raises(ValueError, match="device must be"):
        chute.ray.RemoteLoader(str(folder), device="tpu")
    with pytest.raises(ValueError, match="device_prefetch"):
        chute.ray.RemoteLoader(str(folder), device="sim", device_prefetch=0)


def test_scale_model_is_linear_in_actors_and_capped_by_the_trainer():
    """docs/SCALE.md's model in per-batch times (no cluster: arithmetic on a stats() dict)."""
    from chute.ray.loader import scale_model

    def stats(actor, transfer, wait, consumer, actors=1):
        ms = 1e-3
        return dict(batches=10, actors=actors, actor_s_per_batch=actor * ms, transfer_s_per_batch=transfer * ms,
                    wait_s_per_batch=wait * ms, consumer_s_per_batch=consumer * ms)  # fmt: skip

    # One actor takes 100 ms a batch, the trainer 10 ms + 1 ms of transfer: ceil(100 / 11) = 10 actors,
    # gaining min(10 / 1, (90 + 10) / 11).
    needed, gain = scale_model(stats(100, 1, 90, 10))
    assert needed == 10 and gain == pytest.approx(100 / 11)
    needed, gain = scale_model(stats(100, 1, 45, 10, actors=2))  # two actors already: the gain is what is left
    assert needed == 10 and gain == pytest.approx(55 / 11)
    needed, gain = scale_model(stats(100, 40, 90, 10))  # a large transfer caps it: 2 actors, x2 at most
    assert needed == 2 and gain == pytest.approx(2.0)
    assert scale_model(stats(5, 1, 1, 100)) == (1, 1.0)  # consumer-bound: more actors would not help
    assert scale_model(dict(stats(5, 1, 1, 100), batches=0)) == (None, 1.0)


def _sleeper(per_sample_s: float):
    """An actor hook: a per-sample cost in the actor's call (a sleep, so that it costs no CPU here)."""

    def hook(epoch, indices):
        time.sleep(per_sample_s * len(indices))

    return hook


def test_doctor_on_a_consumer_bound_remote_loader(cluster, tiny_folder, tmp_path):
    """A step far longer than a batch costs the actor: consumer-bound, no "add actors"; storage and the
    comparison runs do not apply to a RemoteLoader and are skipped with a note; both reports show the
    remote layer."""
    import chute.ray

    with chute.ray.RemoteLoader(
        str(tiny_folder), batch_size=4, transforms=[chute.CenterCrop(16)], num_cpus_per_actor=0.5, timeout_s=WAIT_S
    ) as loader:
        d = chute.doctor(
            loader, lambda batch: time.sleep(0.4), steps=6, warmup=2, max_steps=12, report=str(tmp_path / "r.html")
        )
    r, v = d.remote, d.verdict
    assert r is not None and r.actors == 1
    assert r.batches == len(d.run.measured)  # RemoteLoader's figures cover the measured steps, no more
    assert r.consumer_ms >= 300 and r.stall_fraction < 0.1
    assert (v.bound, v.layer) == ("consumer", "consumer"), str(d)
    assert not any(rec.action.startswith("add actors") for rec in v.recommendations)
    text = str(d)
    assert "remote actors (chute.ray.RemoteLoader" in text and "add actors" not in text
    assert any(n.startswith("storage: not probed for a RemoteLoader") for n in d.notes)
    assert any(n.startswith("comparison: not run for a RemoteLoader") for n in d.notes)
    assert d.comparisons == []
    assert "<h2>Remote actors (chute.ray.RemoteLoader" in (tmp_path / "r.html").read_text()


def test_doctor_on_input_bound_remote_actors_recommends_more(cluster, folder, capsys):
    """One actor paying 30 ms a sample (120 ms a batch) against a 10 ms step: input-bound on the actors; the
    doctor (and watch) recommend more actors, with RemoteLoader's model's estimate of the gain."""
    import chute.ray

    with chute.ray.RemoteLoader(
        str(folder),
        batch_size=4,
        transforms=_transforms(),
        num_cpus_per_actor=0.5,
        timeout_s=WAIT_S,
        _actor_hook=_sleeper(0.03),
    ) as loader:
        d = chute.doctor(loader, lambda batch: time.sleep(0.01), steps=6, warmup=2, max_steps=6)
        watched = chute.doctor.watch(loader, steps=4, warmup=1, max_steps=4)
        for i, _ in enumerate(watched):
            time.sleep(0.01)
            if i == 6:
                break
    for diagnosis in (d, watched.diagnosis):
        r, v = diagnosis.remote, diagnosis.verdict
        assert r is not None and r.actors == 1 and r.actor_ms >= 100
        assert (v.bound, v.layer, v.stage) == ("input", "remote", "actors"), str(diagnosis)
        rec = v.recommendations[0]
        assert rec.action.startswith(f"add actors: num_actors={r.actors_needed} (now 1;")
        assert r.actors_needed > 1 and rec.gain == r.actor_gain > 1 and not rec.measured
        assert rec.basis.startswith("model (RemoteLoader's, docs/SCALE.md)")
        assert f"{rec.gain:.1f}x (estimate, at most; model" in str(diagnosis)
    assert watched.diagnosis.remote.batches == 4
    assert "verdict: remote" in capsys.readouterr().err  # watch printed its report


_WATCHED_SCRIPT = """
import sys, time, ray, chute
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
import chute.ray  # after `import chute` installed CHUTE_DOCTOR's hook: RemoteLoader is adopted here
with chute.ray.RemoteLoader(sys.argv[2], batch_size=4, transforms=[chute.CenterCrop(16)],
                            num_cpus_per_actor=0.5, timeout_s=120) as loader:
    for i, batch in enumerate(loader):
        time.sleep(0.25)
        if i == 7:
            break
print("script done")
"""


def test_chute_doctor_environment_watches_a_remote_loader_imported_after_the_hook(cluster, tiny_folder, tmp_path):
    """CHUTE_DOCTOR=1 installs the doctor's hook at `import chute`, before the script imports chute.ray (the
    hook does not import Ray): the first RemoteLoader the script iterates is still watched, and its report
    shows the remote actors."""
    script = tmp_path / "train.py"
    script.write_text(_WATCHED_SCRIPT)
    env = os.environ | {"CHUTE_DOCTOR": "1", "CHUTE_DOCTOR_STEPS": "3", "CHUTE_DOCTOR_WARMUP": "1"}
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run(
        [sys.executable, str(script), address, str(tiny_folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr
    assert "script done" in done.stdout
    assert done.stderr.count("verdict: consumer") == 1, done.stderr
    assert "remote actors (chute.ray.RemoteLoader" in done.stderr


def _tree_digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def _kill_first_attempt(marker_dir: str):
    """A pack hook: the first attempt at part 1 kills its own worker (SIGKILL) midway through the part."""

    def hook(stage, part, samples):
        marker = os.path.join(marker_dir, "killed")
        if stage == "progress" and part == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def test_ray_pack_is_byte_identical_after_a_killed_task(cluster, folder, tmp_path):
    import chute.ray

    reference = tmp_path / "local"
    for part in range(3):
        chute.pack(str(folder), str(reference), part=part, parts=3, shard_size=4096)
    chute.packed.merge(str(reference))
    single = tmp_path / "single"
    chute.pack(str(folder), str(single), shard_size=4096)

    out = tmp_path / "ray"
    summary = chute.ray.pack(
        str(folder),
        str(out),
        parts=3,
        shard_size=4096,
        num_cpus=1,
        progress=False,
        _test_hook=_kill_first_attempt(str(tmp_path)),
    )
    assert (tmp_path / "killed").exists()  # the first attempt did die
    assert summary.samples == 36
    assert _tree_digest(out) == _tree_digest(reference)  # same names, same bytes, no leftovers
    # And the same records as a one-part pack (shard boundaries differ, contents do not).
    a, b = chute.open(str(out)), chute.open(str(single))
    assert [a[i] for i in range(len(a))] == [b[i] for i in range(len(b))]


def test_ray_pack_reuses_a_part_finished_before_its_worker_died(cluster, folder, tmp_path):
    import chute.ray

    marker = str(tmp_path / "killed")

    def hook(stage, part, samples):  # part 0's first attempt dies after its part index is in place
        if stage == "done" and part == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    out = tmp_path / "ray"
    chute.ray.pack(str(folder), str(out), parts=2, shard_size=4096, progress=False, _test_hook=hook)
    assert os.path.exists(marker)
    reference = tmp_path / "local"
    for part in range(2):
        chute.pack(str(folder), str(reference), part=part, parts=2, shard_size=4096)
    chute.packed.merge(str(reference))
    assert _tree_digest(out) == _tree_digest(reference)


@pytest.mark.slow
def test_actors_on_cpu_only_nodes(folder):
    """scripts/ray_cluster.sh: a head plus a 1-CPU worker node with the custom resource cpu_node; the
    actor lands on that node only, and the batches are chute.Loader's."""
    repo = Path(__file__).resolve().parents[2]
    python_dir = str(Path(chute.__file__).parents[1])
    with socket.socket() as s:  # a port of this run's own: another cluster on the machine is not ours to stop
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        PYTHONPATH=python_dir,
        RAY_AUTH_MODE="disabled",
        CHUTE_RAY_PORT=str(port),
        CHUTE_VENV=str(Path(sys.executable).parents[1]),
    )
    script = str(repo / "scripts" / "ray_cluster.sh")
    try:
        subprocess.run([script, "start", "1"], env=env, check=True, timeout=WAIT_S * 2)
        child = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("ray_cluster_child.py")), str(folder)],
            env=dict(env, RAY_ADDRESS=f"127.0.0.1:{port}"),
            capture_output=True,
            text=True,
            timeout=WAIT_S * 2,
        )
        assert child.returncode == 0, child.stderr[-3000:]
        assert "ok 1 worker nodes" in child.stdout
    finally:
        subprocess.run([script, "stop"], env=env, timeout=WAIT_S)


def test_torchrun_two_ranks(folder):
    """torchrun with 2 processes: each rank's RemoteLoader serves that rank's share (chute.Loader's), and
    the shares cover the 36 samples exactly once (even_split=False)."""
    env = dict(
        os.environ, PYTHONPATH=str(Path(chute.__file__).parents[1]), RAY_AUTH_MODE="disabled", OMP_NUM_THREADS="1"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(Path(__file__).with_name("ray_torchrun_child.py")),
            str(folder),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 3,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    counts = sorted(line.split() for line in run.stdout.splitlines() if " ok " in line)
    assert [c[:2] for c in counts] == [["rank", "0"], ["rank", "1"]]
    assert sum(int(c[5]) for c in counts) == 36
