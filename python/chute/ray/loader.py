"""chute.ray.RemoteLoader: chute.Loader's batches, made by Ray actors on other CPUs (or machines).

The driver (the trainer's process) owns the epoch: it computes the epoch's order exactly as chute.Loader
does (``chute._native.epoch_order``: the same permutation and the same rank sharding), cuts it into batches
``[b*B, (b+1)*B)`` and hands each batch's source indices to an actor. Batches come back through Ray's
object store as numpy arrays and are yielded in batch order. Nothing in a batch depends on which actor made
it (augmentation is keyed by seed, epoch and source index), which gives:

- same bytes: the batches equal chute.Loader's on one machine, for the same arguments;
- fault tolerance: a batch whose actor died is sent again, to a survivor or to the restarted actor;
  each batch id is yielded once, in order, so nothing is lost and nothing duplicated;
- bounded memory: at most ``max_inflight`` batches are requested and not yet yielded; a slow trainer
  leaves the actors idle rather than filling the object store.

Batch b's home is the (b mod K)-th live actor; the first call of an epoch to an actor carries its plan
(its home batches), which its engine runs ahead of the calls (actor.py). With ``device=``, batches go on
to the device through chute's DeviceSlots, copied from the object-store buffer (device.py).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import deque
from collections.abc import Iterator

import numpy as np
import ray
import torch
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError

from chute import _native, _resume_state, _validate
from chute import delivery as _delivery
from chute.errors import SampleError
from chute.loader import _DECODE, _DELIVERY, _resolve_distributed
from chute.ray.actor import BatchActor, from_wire, source_spec

_ACTOR_LOST = (ActorDiedError, ActorUnavailableError)
_SLICE_S = 0.1  # waits run in slices so that Ctrl-C is handled
# stats()'s counters, which stats_since() differences; max_outstanding is a maximum, kept as now
_COUNTERS = ("batches", "samples", "actor_busy_s", "transfer_s", "wait_s", "consumer_s", "resubmitted")


class RemoteLoader:
    """Iterates over ``(images, labels)`` batches like :class:`chute.Loader`, with the decoding and
    augmentation done by ``num_actors`` Ray actors that each reserve ``num_cpus_per_actor`` CPUs and run
    ``threads_per_actor`` decode threads (default: as many as the CPUs).

    Same arguments and semantics as chute.Loader where they apply (``shuffle``, ``seed``, ``drop_last``,
    ``transforms``, ``dtype``, ``memory_format``, ``rank``/``world_size``/``even_split``, ``max_pixels``,
    ``apply_exif_orientation``, ``decode``, ``reducing_gap``, ``validate``, ``max_file_bytes``), and the same
    protocol: ``len``, ``iter`` (one epoch), ``set_epoch``, ``state_dict``/``load_state_dict`` (the same
    dict format as chute.Loader's), ``stats``, ``close`` / ``with``. ``on_error='raise'`` only: a bad
    sample raises :class:`chute.SampleError` in place of its batch, and ``next()`` goes on with the next
    batch, as locally. (``'skip'`` would fill a batch from the next samples, which moves every later
    batch: it is refused rather than giving batches that differ from chute.Loader's.)

    ``source`` is a path or a chute source; each actor opens it again on its own node, so the path must
    be readable there. ``actor_options`` goes to Ray's ``.options()`` (e.g. ``{"resources":
    {"cpu_node": 1}}`` to place actors on CPU-only nodes). An actor that dies is restarted by Ray up to
    ``max_restarts`` times; its batches go to the survivors meanwhile. ``timeout_s`` bounds the wait for
    any one batch (an error, never a hang).

    Batches are CPU tensors whose memory is the object store's (read-only shared memory on the trainer's
    node, no copy): ``.clone()`` a batch you want to modify in place; ``.to('cuda')`` copies from it.

    ``device='cuda'`` (or ``'cuda:N'``) yields batches on that GPU, as chute.Loader's ``device=`` does:
    the actors make uint8 batches, the copy to the GPU reads the object-store buffer itself (registered
    with CUDA once per 64 MiB window of the store) on a stream of chute's own, up to ``device_prefetch``
    batches ahead, within ``max_device_memory``; the consumer's current stream waits for each copy, and a
    float ``dtype`` (and ``Normalize``) is computed on the GPU. Each batch's object is held until its copy
    has completed, so the object store holds up to ``max_inflight + device_prefetch`` of this trainer's
    batches. Like chute.Loader's, a device batch's buffer is reused once its tensors are freed:
    ``.clone()`` what you keep. ``device='sim'`` is for chute's tests (a simulated GPU in host memory).
    """

    def __init__(
        self,
        source,
        batch_size: int = 1,
        *,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        transforms=(),
        dtype: torch.dtype = torch.uint8,
        memory_format: torch.memory_format = torch.contiguous_format,
        num_actors: int = 1,
        num_cpus_per_actor: float = 1,
        threads_per_actor: int | None = None,
        max_inflight: int | None = None,
        max_restarts: int = 3,
        actor_options: dict | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        even_split: bool = True,
        on_error: str = "raise",
        max_pixels: int = 200_000_000,
        apply_exif_orientation: bool = False,
        decode: str = _DECODE.decode,
        reducing_gap: float = _DECODE.reducing_gap,
        validate: str = "window",
        max_file_bytes: int = 1 << 30,
        timeout_s: float = 300.0,
        device="cpu",
        device_prefetch: int = _DELIVERY.device_prefetch,
        max_device_memory: int = _DELIVERY.max_device_memory,
        _actor_hook=None,
    ):
        if on_error != "raise":
            raise ValueError(
                f"RemoteLoader supports on_error='raise' only, got {on_error!r}: 'skip' fills a "
                "batch from the next samples, which moves every later batch"
            )
        self.batch_size = _validate.integer("batch_size", batch_size, 1, _validate.INT64_MAX)
        self.num_actors = _validate.integer("num_actors", num_actors, 1, 1 << 20)
        self.max_inflight = _validate.integer(
            "max_inflight", 2 * self.num_actors if max_inflight is None else max_inflight, 1, 1 << 20
        )
        self.max_restarts = _validate.integer("max_restarts", max_restarts, 0, 1 << 20)
        if not (isinstance(num_cpus_per_actor, (int, float)) and num_cpus_per_actor > 0):
            raise ValueError(f"num_cpus_per_actor must be positive, got {num_cpus_per_actor!r}")
        threads = threads_per_actor or max(1, int(num_cpus_per_actor))
        self.num_cpus_per_actor = num_cpus_per_actor
        self.timeout_s = float(timeout_s)
        self.seed = _validate.integer("seed", seed, 0, _validate.UINT64_MAX)
        self.shuffle, self.drop_last, self.even_split = bool(shuffle), bool(drop_last), bool(even_split)
        self.dtype, self._channels_last = dtype, memory_format == torch.channels_last
        self.rank, self.world_size = _resolve_distributed(rank, world_size)
        device_kind, _ = _delivery.parse_device(device)
        normalize = None
        if device_kind != "cpu":  # uint8 crosses to the device; Normalize and the dtype are applied there
            transforms, normalize = _delivery.split_normalize(transforms)
        spec = source_spec(source)
        from chute.ray.actor import open_source

        self.source = open_source(spec) if isinstance(source, (str, os.PathLike)) else source
        self._dataset_size = len(self.source)
        # Checks the shard (rank, world_size against the dataset) and gives this rank's epoch size.
        self.num_samples = int(
            _native.epoch_order(
                self._dataset_size,
                shuffle=False,
                seed=0,
                epoch=0,
                rank=self.rank,
                world_size=self.world_size,
                even_split=self.even_split,
            ).shape[0]
        )
        # dtype and memory_format travel as names: torch's memory_format objects do not unpickle everywhere
        # (by reference to a name in the pickling module, which fails when that is a script's __main__).
        loader_kwargs = {
            "seed": self.seed,
            "transforms": transforms,
            "dtype": "uint8" if device_kind != "cpu" else str(dtype).removeprefix("torch."),
            "memory_format": "channels_last" if self._channels_last else "contiguous_format",
            "num_threads": threads,
            "max_pixels": max_pixels,
            "apply_exif_orientation": apply_exif_orientation,
            "decode": decode,
            "reducing_gap": reducing_gap,
            "validate": validate,
            "max_file_bytes": max_file_bytes,
        }
        self._delivery = None
        self.device = torch.device("cpu")
        if device_kind != "cpu":
            from chute.ray.device import RemoteDelivery

            self._delivery = RemoteDelivery(
                device, dtype, normalize, self._channels_last, self.batch_size, self.seed, device_prefetch,
                max_device_memory,
            )  # fmt: skip
            self.device = "sim" if device_kind == "sim" else self._delivery.torch_device
        if not ray.is_initialized():
            ray.init()  # RAY_ADDRESS, a cluster `ray start` began on this machine, else a local one
        actor_class = ray.remote(BatchActor).options(
            num_cpus=num_cpus_per_actor, max_restarts=self.max_restarts, max_task_retries=0, **(actor_options or {})
        )
        self._actors = [
            actor_class.remote(spec, self.batch_size, loader_kwargs, _actor_hook) for _ in range(self.num_actors)
        ]
        self._dead = [False] * self.num_actors  # gone for good
        self._suspect: dict[int, ray.ObjectRef] = {}  # a batch failed with the actor: its pid() probe
        self._closed = False
        # The actors' constructors run now: a source they cannot open fails here, naming it.
        self._pids = ray.get([a.pid.remote() for a in self._actors], timeout=self.timeout_s)
        self._epoch, self._resume_position, self._running, self._iteration = 0, 0, None, 0
        self._resume_splits, self._running_splits, self._running_size = [], [], 0  # as chute.Loader's
        self._position = 0  # samples the consumer received in the running epoch
        self.reset_stats()

    # --- the protocol chute.Loader has -------------------------------------------------------------------
    def __len__(self) -> int:
        """This rank's batches per epoch."""
        full, rest = divmod(self.num_samples, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def set_epoch(self, epoch: int) -> None:
        self._epoch, self._resume_position = _validate.integer("epoch", epoch, 0, _validate.INT64_MAX), 0
        self._resume_splits = []

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:
            raise RuntimeError("the loader is closed: make a new chute.ray.RemoteLoader to iterate again")
        self._iteration += 1
        if self._delivery is not None:
            self._delivery.drain()  # batches copied ahead for an iteration that was left
        epoch, start, splits = self._epoch, self._resume_position, self._resume_splits
        self._epoch, self._resume_position, self._running, self._position = epoch + 1, 0, epoch, start
        self._resume_splits, self._running_splits = [], splits
        order = _native.epoch_order(
            self._dataset_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            world_size=self.world_size,
            even_split=self.even_split,
            splits=splits,
        )
        self._running_size = len(order)
        bounds = [(lo, min(lo + self.batch_size, len(order))) for lo in range(start, len(order), self.batch_size)]
        if self.drop_last and bounds and bounds[-1][1] - bounds[-1][0] < self.batch_size:
            bounds.pop()
        return _RemoteEpoch(self, self._iteration, epoch, order, bounds)

    def state_dict(self) -> dict:
        """As chute.Loader's: the position counts samples this rank's consumer received."""
        resume = _resume_state.Resume(self._epoch, self._resume_position, self._resume_splits)
        if self._running is not None:
            epoch, position = _resume_state.received(self._running, self._position, self._running_size)
            resume = _resume_state.Resume(epoch, position, self._running_splits if epoch == self._running else [])
        return _resume_state.make(self, resume)

    def load_state_dict(self, state: dict | list[dict]) -> None:
        """As chute.Loader's (every rank's states resume any world size); a state taken in chute.Loader's
        shard order is refused (this visits the sample order)."""
        self._epoch, self._resume_position, self._resume_splits = _resume_state.check(state, self)
        self._iteration += 1  # an iteration in progress is superseded
        self._running = None

    def actor_pids(self) -> list[int]:
        """The live actors' process ids (a restarting actor answers once it is up), for diagnostics and
        fault tests."""
        pids = []
        for i in range(self.num_actors):
            while not self._dead[i]:
                try:
                    pids.append(ray.get(self._actors[i].pid.remote(), timeout=self.timeout_s))
                    self._suspect.pop(i, None)
                    break
                except ActorDiedError:
                    self._dead[i] = True  # gone for good: killed with no_restart, or out of restarts
                except ActorUnavailableError:
                    time.sleep(_SLICE_S)  # restarting
        return pids

    def actor_stats(self) -> list[dict]:
        """Each live actor's chute.Loader statistics (its decode threads' stage and CPU times, since the
        actor started). An actor answers after the batches already queued on it."""
        refs = [self._actors[i].engine_stats.remote() for i in range(self.num_actors) if not self._dead[i]]
        return ray.get(refs, timeout=self.timeout_s)

    def stats(self) -> dict:
        """Where the time went since creation or :meth:`reset_stats` (seconds): ``actor_busy_s`` (summed over
        actors: their calls that returned the batches this trainer received; an actor's engine works ahead
        of its calls, so a call lasts about a batch's making when the actor is the limit, less when it is
        not), ``transfer_s`` (``ray.get`` of ready batches:
        object-store transfer and deserialisation), ``wait_s`` (the trainer blocked in ``next()``, transfer
        included), ``consumer_s`` (the trainer's own time between batches), ``resubmitted`` (batches sent
        again after an actor died), ``max_outstanding`` (most batches requested and not yet yielded); each
        time also per batch (``actor_s_per_batch``, ``transfer_s_per_batch``, ``wait_s_per_batch``,
        ``consumer_s_per_batch``), the ``stall_fraction``, docs/SCALE.md's model on these figures
        (``actors_needed``, ``actor_gain``: :func:`scale_model`) and a ``verdict`` in words."""
        return self._figures(dict(self._stats))

    def stats_since(self, earlier: dict | None) -> dict:
        """:meth:`stats` over the span since ``earlier``, a :meth:`stats` dict this loader returned before
        (None: since creation or :meth:`reset_stats`): the counters differenced, ``max_outstanding`` as now,
        and the per-batch figures, the model and the verdict computed on the span. For measuring a stretch
        of a job (``chute.doctor``) without resetting the user's figures."""
        s = dict(self._stats)
        if earlier is not None:
            for key in _COUNTERS:
                s[key] -= earlier[key]
        return self._figures(s)

    def _figures(self, s: dict) -> dict:
        n = max(s["batches"], 1)
        s["actors"] = self.num_actors - sum(self._dead)
        s["num_cpus_per_actor"], s["max_inflight"] = self.num_cpus_per_actor, self.max_inflight
        for key in ("actor", "transfer", "wait", "consumer"):
            s[f"{key}_s_per_batch"] = s["actor_busy_s" if key == "actor" else f"{key}_s"] / n
        busy_time = s["wait_s"] + s["consumer_s"]
        s["stall_fraction"] = s["wait_s"] / busy_time if busy_time > 0 else 0.0
        s["actors_needed"], s["actor_gain"] = scale_model(s)
        s["verdict"] = _verdict(s)
        return s

    def reset_stats(self) -> None:
        self._stats = {
            "batches": 0,
            "samples": 0,
            "actor_busy_s": 0.0,
            "transfer_s": 0.0,
            "wait_s": 0.0,
            "consumer_s": 0.0,
            "resubmitted": 0,
            "max_outstanding": 0,
        }
        self._last_return: float | None = None

    def close(self) -> None:
        """Ends the actors. Batches already yielded stay valid (the object store keeps them while referenced)."""
        if self._closed:
            return
        self._closed = True
        self._iteration += 1
        if getattr(self, "_delivery", None) is not None:
            self._delivery.close()
        for a in getattr(self, "_actors", []):
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # the cluster may be gone already
                pass

    def __enter__(self) -> RemoteLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if ray.is_initialized():
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"chute.ray.RemoteLoader({self.source!r}, batch_size={self.batch_size}, "
            f"num_actors={self.num_actors}, max_inflight={self.max_inflight})"
        )

    # --- actors ------------------------------------------------------------------------------------------
    def _check_suspects(self) -> None:
        """Settles the actors whose batch failed: a probe that answers means alive (restarted, or it was
        a transient loss), ActorDiedError means gone for good."""
        if not self._suspect:
            return
        ready, _ = ray.wait(list(self._suspect.values()), num_returns=len(self._suspect), timeout=0)
        for i, probe in list(self._suspect.items()):
            if probe not in ready:
                continue
            try:
                ray.get(probe, timeout=self.timeout_s)
                del self._suspect[i]
            except ActorDiedError:
                self._dead[i] = True
                del self._suspect[i]
            except ActorUnavailableError:
                self._suspect[i] = self._actors[i].pid.remote()  # still restarting: ask again

    def _pick_actor(self, load: list[int], avoid: int | None, home: int | None = None) -> int:
        """The batch's home actor when it is live, trusted and not ``avoid``; else the live actor with the
        fewest outstanding batches: one not suspect and not ``avoid`` when there is one; else a suspect one
        (a restarting actor queues the batch until it is up)."""
        self._check_suspects()
        alive = [i for i in range(self.num_actors) if not self._dead[i]]
        if not alive:
            raise RuntimeError(
                f"all {self.num_actors} RemoteLoader actors are dead (each died more than "
                f"max_restarts={self.max_restarts} times, or was killed with no_restart)"
            )
        trusted = [i for i in alive if i not in self._suspect]
        if home is not None and home != avoid and home in trusted:
            return home
        choice = [i for i in trusted if i != avoid] or trusted or alive
        return min(choice, key=lambda i: load[i])

    def _actor_lost(self, i: int) -> None:
        """A batch sent to actor i failed because the actor died or became unreachable."""
        if i not in self._suspect and not self._dead[i]:
            self._suspect[i] = self._actors[i].pid.remote()


def scale_model(s: dict) -> tuple[int | None, float]:
    """docs/SCALE.md's throughput model in per-batch times, on a :meth:`RemoteLoader.stats` dict. With K
    actors making batches in parallel, the trainer receives one every ``max(a / K, c + x)`` seconds: ``a``
    an actor's time per batch (``actor_s_per_batch``), ``c`` the trainer's own time per batch
    (``consumer_s_per_batch``), ``x`` the object-store transfer (``transfer_s_per_batch``), which the trainer
    pays whatever the number of actors. Returns ``(actors_needed, actor_gain)``: the actors that bring
    ``a / K`` down to ``c + x`` (``ceil(a / (c + x))``; None before any batch, or when ``c + x`` is 0), and
    the expected speed-up of the batches the trainer receives with them, against its time per batch now
    (``wait + c``): ``min(actors_needed / K, (wait + c) / (c + x))``, linear in the actors and capped by
    the trainer's own time and the transfer; 1.0 when more actors would not help. An upper bound: the
    driver's own work per batch (Ray's submit and wait) is not in ``c + x``."""
    if s["batches"] == 0 or s["actor_s_per_batch"] <= 0:
        return None, 1.0
    floor = s["consumer_s_per_batch"] + s["transfer_s_per_batch"]
    if floor <= 0:
        return None, 1.0
    needed = max(1, math.ceil(s["actor_s_per_batch"] / floor))
    now = s["wait_s_per_batch"] + s["consumer_s_per_batch"]
    gain = min(needed / max(s["actors"], 1), now / max(s["actor_s_per_batch"] / needed, floor))
    return needed, max(gain, 1.0)


def _verdict(s: dict) -> str:
    if s["batches"] == 0:
        return "no batches yet"
    if s["stall_fraction"] < _native.INPUT_BOUND_STALL:  # the doctor's threshold and chute.Loader's
        return "consumer-bound: the trainer rarely waits; more actors would not help"
    needed, gain = s["actors_needed"], s["actor_gain"]
    head = f"input-bound: the trainer waits {100 * s['stall_fraction']:.0f}% of its time"
    if needed is None or needed <= s["actors"]:
        return f"{head}; more actors would not help (the wait is the transfer and the driver's work)"
    return (
        f"{head}; about {needed} actors would keep it busy (x{gain:.1f} the batches it receives with the "
        f"{s['actors']} now; model: docs/SCALE.md)"
    )


class _RemoteEpoch(Iterator):
    """One epoch of a RemoteLoader: submits batches up to max_inflight ahead, yields them in order.

    Batch b's home is the b-th live actor, round-robin. The first batch sent to its home actor carries the
    actor's plan (its home batches from there on), so that its engine works ahead of the calls (actor.py).
    A batch whose home is dead or suspect, or that failed with its actor, goes to the least-loaded other
    actor; an actor that failed gets a new plan with its next home batch (a restarted actor has none)."""

    def __init__(self, loader: RemoteLoader, iteration: int, epoch: int, order: np.ndarray, bounds: list):
        self._loader, self._iteration, self._epoch = loader, iteration, epoch
        self._order, self._bounds = order, bounds
        self._next_submit = 0
        self._next_receive = 0  # the next batch to take from the object store, in order
        self._staged: deque[tuple[int, tuple]] = deque()  # device delivery: received, copy issued, not yielded
        self._pending: dict[int, tuple[ray.ObjectRef, int]] = {}  # batch -> (ref, actor)
        self._attempts: dict[int, int] = {}
        self._load = [0] * loader.num_actors
        self._done = False
        alive = [i for i in range(loader.num_actors) if not loader._dead[i]] or [0]
        self._homes = [alive[b % len(alive)] for b in range(len(bounds))]
        self._planned: set[int] = set()  # actors whose engine runs this epoch's plan

    def _plan(self, actor: int, b: int) -> np.ndarray:
        """Actor's home batches from batch b on, as one array of source indices."""
        batches = [self._bounds[c] for c in range(b, len(self._bounds)) if self._homes[c] == actor]
        return np.concatenate([self._order[lo:hi] for lo, hi in batches])

    def _submit(self, b: int, avoid: int | None = None) -> None:
        loader = self._loader
        home = self._homes[b]
        i = loader._pick_actor(self._load, avoid, home)
        lo, hi = self._bounds[b]
        plan = None
        if i == home and i not in self._planned:
            plan = self._plan(i, b)
            self._planned.add(i)
        ref = loader._actors[i].batch.remote(self._epoch, self._order[lo:hi], plan)
        self._pending[b] = (ref, i)
        self._load[i] += 1

    def _fill(self) -> None:
        loader = self._loader
        while self._next_submit < len(self._bounds) and len(self._pending) < loader.max_inflight:
            self._submit(self._next_submit)
            self._next_submit += 1
        loader._stats["max_outstanding"] = max(loader._stats["max_outstanding"], len(self._pending))

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        loader = self._loader
        if self._iteration != loader._iteration:
            if loader._closed:
                raise RuntimeError("the loader was closed during iteration")
            raise RuntimeError("this iterator was superseded: a newer iter(loader) restarted the loader")
        if self._done:
            raise StopIteration
        entered = time.perf_counter()
        if loader._last_return is not None:
            loader._stats["consumer_s"] += entered - loader._last_return
        try:
            return self._next_batch(entered)
        finally:
            loader._last_return = time.perf_counter()
            loader._stats["wait_s"] += loader._last_return - entered

    def _next_batch(self, entered: float):
        loader = self._loader
        delivery = loader._delivery
        deadline = entered + loader.timeout_s
        if delivery is None:
            if self._next_receive >= len(self._bounds):
                self._end()
            return self._yield(*self._receive(deadline))
        # Device delivery: copies run ahead of the consumer, up to the device prefetch, for batches that are
        # already here (the wait is for the batch the consumer asks for, never for one ahead of it).
        while (
            self._next_receive < len(self._bounds)
            and len(self._staged) < delivery.prefetch
            and delivery.can_issue()
            and (not self._staged or self._arrived(self._next_receive))
        ):
            b, result = self._receive(deadline)
            if result[0] == "ok":
                delivery.issue(result[1], result[2])  # holds the arrays until their copy completed
                result = ("ok", None, None, result[3])
            self._staged.append((b, result))
        if not self._staged:
            if self._next_receive >= len(self._bounds):
                self._end()
            raise RuntimeError(
                f"all {delivery.slots.num_slots} device batch buffers are held by batches the consumer still "
                "references (e.g. stored in a list); release them, keep copies (tensor.clone()), or raise "
                "device_prefetch"
            )
        return self._yield(*self._staged.popleft())

    def _end(self):
        self._done, self._loader._running = True, None
        raise StopIteration

    def _arrived(self, b: int) -> bool:
        self._fill()
        if b not in self._pending:
            return False
        ready, _ = ray.wait([self._pending[b][0]], timeout=0)
        return bool(ready)

    def _receive(self, deadline: float) -> tuple[int, tuple]:
        """The next batch in order from its actor (resent when the actor died): (b, the actor's result)."""
        loader = self._loader
        b = self._next_receive
        self._fill()
        while True:
            ref, actor = self._pending[b]
            ready, _ = ray.wait([ref], timeout=_SLICE_S)
            if not ready:
                if time.perf_counter() > deadline:
                    raise TimeoutError(
                        f"RemoteLoader: batch {b} of epoch {self._epoch} not ready after "
                        f"{loader.timeout_s:.0f} s (actor {actor}; timeout_s= raises the limit)"
                    )
                continue
            got = time.perf_counter()
            try:
                result = ray.get(ref, timeout=loader.timeout_s)
            except _ACTOR_LOST as lost:
                # The actor died with this batch (or before it): send it again, to a survivor if any.
                self._load[actor] -= 1
                loader._actor_lost(actor)
                self._planned.discard(actor)  # restarted, it has no plan: its next home batch brings one
                loader._stats["resubmitted"] += 1
                self._attempts[b] = self._attempts.get(b, 1) + 1
                if self._attempts[b] > (loader.max_restarts + 1) * loader.num_actors + 1:
                    raise RuntimeError(
                        f"RemoteLoader: batch {b} of epoch {self._epoch} was lost with its actor "
                        f"{self._attempts[b] - 1} times; giving up"
                    ) from lost
                self._submit(b, avoid=actor)
                continue
            except GetTimeoutError:
                continue
            loader._stats["transfer_s"] += time.perf_counter() - got
            break
        del self._pending[b]
        self._load[actor] -= 1
        self._next_receive += 1
        self._fill()  # the freed place goes to the next batch at once
        return b, result

    def _yield(self, b: int, result: tuple):
        loader = self._loader
        lo, hi = self._bounds[b]
        loader._position = hi
        if result[0] == "error":
            raise SampleError(*result[1])
        _, images, labels, busy = result
        loader._stats["batches"] += 1
        loader._stats["samples"] += hi - lo
        loader._stats["actor_busy_s"] += busy
        if loader._delivery is not None:
            return loader._delivery.next()
        # labels: a copy of their own (as chute.Loader), so that keeping them holds no object-store memory
        return from_wire(images, loader.dtype, loader._channels_last), torch.from_numpy(labels.copy())


# `chute doctor script.py` / CHUTE_DOCTOR=1 installed its hook before this import (the hook does not import
# Ray): the first RemoteLoader iterated is watched too. Only when the doctor is loaded already.
if "chute.doctor.api" in sys.modules:
    sys.modules["chute.doctor.api"].adopt_loader_class(RemoteLoader)
