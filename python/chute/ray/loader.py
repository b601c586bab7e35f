"""chute.ray.RemoteLoader: chute.Loader's batches, made by Ray actors on other CPUs (or machines).

The driver (the trainer's process) owns the epoch. It is built from the same description of the engine as
chute.Loader (``chute._options.build``: one ``LoaderOptions``, checked once), computes the epoch's order from
it exactly as chute.Loader does (``chute._native.epoch_order(source, options, epoch)``: the same permutation
or shard-window order, the same rank sharding), cuts it into batches ``[b*B, (b+1)*B)`` and hands each
batch's source indices to an actor, whose engine is built from that same options object, pickled.
Batches come back through Ray's object store as numpy arrays and are yielded in batch order. Nothing in a
batch depends on which actor made it (augmentation is keyed by seed, epoch and source index), which gives:

- same bytes: the batches equal chute.Loader's on one machine, for the same arguments (``on_error='skip'``
  included: the actors' batches, short of their bad samples, are re-packed in order, repack.py);
- fault tolerance: a batch whose actor died is sent again, to a survivor or to the restarted actor;
  each batch id is yielded once, in order, so nothing is lost and nothing duplicated (schedule.py);
- bounded memory: at most ``max_inflight`` batches are requested and not yet yielded; a slow trainer
  leaves the actors idle rather than filling the object store.

Batch b's home is the (b mod K)-th live actor; the first call of an epoch to an actor carries its plan
(its home batches), which its engine runs ahead of the calls (actor.py). With ``device=``, batches go on
to the device through chute's DeviceSlots, copied from the object-store buffer (device.py).
"""

from __future__ import annotations

import copy
import math
import os
import sys
import warnings
from collections.abc import Iterator

import ray
import torch

from chute import _native, _options, _resume_state, _validate
from chute import delivery as _delivery
from chute._options import DEFAULTS
from chute.errors import SampleError
from chute.ray.actor import BatchActor, open_source, source_spec
from chute.ray.schedule import ActorPool, RemoteEpoch

# stats()'s counters, which stats_since() differences; max_outstanding is a maximum, kept as now
_COUNTERS = ("batches", "samples", "actor_busy_s", "transfer_s", "wait_s", "consumer_s", "resubmitted", "repacked")


class RemoteLoader:
    """Iterates over ``(images, labels)`` batches like :class:`chute.Loader`, with the decoding and
    augmentation done by ``num_actors`` Ray actors that each reserve ``num_cpus_per_actor`` CPUs.

    Every engine argument is chute.Loader's, with its default and meaning (``shuffle``, ``seed``,
    ``drop_last``, ``transforms``, ``dtype``, ``memory_format``, ``order``/``shard_window``,
    ``rank``/``world_size``/``even_split``, ``on_error``, ``max_pixels``, ``validate``, ...), applied in each
    actor: ``num_threads``, ``max_threads``, ``prefetch``, ``max_memory`` and ``max_ring_bytes`` are each
    actor's (``max_threads=None`` is the actor's ``num_cpus_per_actor``, at least 1, rather than the node's
    cores; ``prefetch`` is the batches its engine makes ahead of the driver's calls). The protocol is
    chute.Loader's: ``len``, ``iter`` (one epoch), ``set_epoch``, ``state_dict``/``load_state_dict`` (the
    same dict as chute.Loader's: either resumes the other), ``errors``, ``stats``, ``close`` / ``with``.
    ``order='shards'`` reads remote shards in the shard-window order, each actor its batches' shards.
    ``on_error='raise'`` raises :class:`chute.SampleError` (index, path, reason) in place of a bad sample's
    batch, and ``next()`` goes on with the next batch; ``'skip'`` leaves the sample out, fills the batch from
    the next samples and lists it in :meth:`errors`: the same batches as chute.Loader's, either way.

    ``source`` is a path or a chute source; each actor opens it again on its own node, so the path must
    be readable there. ``actor_options`` goes to Ray's ``.options()`` (e.g. ``{"resources":
    {"cpu_node": 1}}`` to place actors on CPU-only nodes). An actor that dies is restarted by Ray up to
    ``max_restarts`` times; its batches go to the survivors meanwhile. ``timeout_s`` bounds the wait for
    any one batch (an error, never a hang).

    Batches are CPU tensors whose memory is the object store's (read-only shared memory on the trainer's
    node, no copy): ``.clone()`` a batch you want to modify in place; ``.to('cuda')`` copies from it. (After
    a sample skipped under ``'skip'``, the epoch's later batches are joined from two actors' batches: a copy
    in the trainer's memory.)

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
        batch_size: int = DEFAULTS.batch_size,
        *,
        shuffle: bool = DEFAULTS.shuffle,
        seed: int = DEFAULTS.seed,
        drop_last: bool = DEFAULTS.drop_last,
        transforms=(),
        dtype: torch.dtype = DEFAULTS.dtype,
        memory_format: torch.memory_format = DEFAULTS.memory_format,
        num_threads: int | str = DEFAULTS.num_threads,
        prefetch: int | str = DEFAULTS.prefetch,
        max_threads: int | None = DEFAULTS.max_threads,
        max_memory: int = DEFAULTS.max_memory,
        on_error: str = DEFAULTS.on_error,
        max_pixels: int = DEFAULTS.max_pixels,
        apply_exif_orientation: bool = DEFAULTS.apply_exif_orientation,
        decode: str = DEFAULTS.decode,
        reducing_gap: float = DEFAULTS.reducing_gap,
        validate: str = DEFAULTS.validate,
        accept_truncated: bool = DEFAULTS.accept_truncated,
        rank: int | None = DEFAULTS.rank,
        world_size: int | None = DEFAULTS.world_size,
        even_split: bool = DEFAULTS.even_split,
        order: str = DEFAULTS.order,
        shard_window: int = DEFAULTS.shard_window,
        device="cpu",
        device_prefetch: int = DEFAULTS.device_prefetch,
        max_device_memory: int = DEFAULTS.max_device_memory,
        max_file_bytes: int = DEFAULTS.max_file_bytes,
        max_ring_bytes: int = DEFAULTS.max_ring_bytes,
        num_actors: int = 1,
        num_cpus_per_actor: float = 1,
        max_inflight: int | None = None,
        max_restarts: int = 3,
        actor_options: dict | None = None,
        timeout_s: float = 300.0,
        _actor_hook=None,
    ):
        spec = _options.build_from(locals())  # the engine keywords above, by name: checked here
        options = self._options = spec.loader
        self.num_actors = _validate.integer("num_actors", num_actors, 1, 1 << 20)
        self.max_inflight = _validate.integer(
            "max_inflight", 2 * self.num_actors if max_inflight is None else max_inflight, 1, 1 << 20
        )
        self.max_restarts = _validate.integer("max_restarts", max_restarts, 0, 1 << 20)
        if not (isinstance(num_cpus_per_actor, (int, float)) and num_cpus_per_actor > 0):
            raise ValueError(f"num_cpus_per_actor must be positive, got {num_cpus_per_actor!r}")
        if options.max_threads == 0 and options.num_threads == 0:  # None: the actor's CPUs, not the node's
            options.max_threads = max(1, int(num_cpus_per_actor))
        self.num_cpus_per_actor = num_cpus_per_actor
        self.timeout_s = float(timeout_s)
        self.batch_size, self.seed, self.shuffle = options.batch_size, options.seed, options.shuffle
        self.drop_last, self.even_split, self.on_error = options.drop_last, options.even_split, options.on_error
        self.order, self.shard_window = options.order, options.shard_window
        self.rank, self.world_size = options.rank, options.world_size
        self.dtype, self._channels_last = spec.dtype, options.channels_last
        device_kind, _ = _delivery.parse_device(device)
        normalize = None
        if device_kind != "cpu":  # uint8 crosses to the device; Normalize and the dtype are applied there
            transforms, normalize = _delivery.split_normalize(transforms)
            options.dtype = "uint8"
        where = source_spec(source)
        self.source = open_source(where) if isinstance(source, (str, os.PathLike)) else source
        # Checks the shard (rank, world_size against the dataset) and, for order='shards', the source's
        # shards, as chute.Loader does; gives this rank's epoch size.
        self.num_samples = len(_native.epoch_order(self.source._native, options, 0))
        self._epoch, self._resume_position, self._running, self._iteration = 0, 0, None, 0
        self._resume_splits, self._running_splits, self._running_size = [], [], 0  # as chute.Loader's
        self._position = 0  # samples the consumer received in the running epoch
        self._errors: list[SampleError] = []  # skipped samples (on_error='skip'), as the batches arrived
        self._closed = False
        self._delivery = None
        self.device = torch.device("cpu")
        if device_kind != "cpu":
            from chute.ray.device import RemoteDelivery

            delivery = spec.delivery
            self._delivery = RemoteDelivery(
                device, spec.dtype, normalize, self._channels_last, self.batch_size, self.seed,
                delivery.device_prefetch, delivery.max_device_memory,
            )  # fmt: skip
            self.device = "sim" if device_kind == "sim" else self._delivery.torch_device
        if not ray.is_initialized():
            ray.init()  # RAY_ADDRESS, a cluster `ray start` began on this machine, else a local one
        actor_class = ray.remote(BatchActor).options(
            num_cpus=num_cpus_per_actor, max_restarts=self.max_restarts, max_task_retries=0, **(actor_options or {})
        )
        # The actors make every batch they are asked for, a short last one too: dropping it is the driver's
        # (under 'skip' its samples may fill the batches before it).
        shipped = copy.copy(options)
        shipped.drop_last = False
        actors = [actor_class.remote(where, shipped, transforms, _actor_hook) for _ in range(self.num_actors)]
        self._pool = ActorPool(actors, self.max_restarts, self.timeout_s)
        # The actors' engines are built now: a source they cannot open, or options the engine refuses
        # (a max_memory that does not hold one batch's buffers, ...), fail here, as themselves, naming it.
        try:
            started = ray.get([a.start.remote() for a in actors], timeout=self.timeout_s)
        except BaseException:
            self.close()
            raise
        self._pids = [pid for pid, _ in started]
        for notice in started[0][1]:  # the same in every actor: e.g. a prefetch lowered to fit max_memory
            warnings.warn(f"chute.ray.RemoteLoader actors: {notice}", stacklevel=2)
        self.reset_stats()

    # --- the protocol chute.Loader has -------------------------------------------------------------------
    def __len__(self) -> int:
        """This rank's batches per epoch (with ``on_error='skip'``, an epoch with bad samples may yield fewer)."""
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
        order = _native.epoch_order(self.source._native, self._options, epoch, splits)
        self._running_size = len(order)
        bounds = [(lo, min(lo + self.batch_size, len(order))) for lo in range(start, len(order), self.batch_size)]
        # A last short batch that drop_last drops is not made, unless 'skip' may need its samples to fill
        # the batches before it.
        if self.drop_last and self.on_error == "raise" and bounds and bounds[-1][1] - bounds[-1][0] < self.batch_size:
            bounds.pop()
        return RemoteEpoch(self, self._iteration, epoch, order, bounds)

    def state_dict(self) -> dict:
        """As chute.Loader's: the position counts samples this rank's consumer received."""
        resume = _resume_state.Resume(self._epoch, self._resume_position, self._resume_splits)
        if self._running is not None:
            epoch, position = _resume_state.received(self._running, self._position, self._running_size)
            resume = _resume_state.Resume(epoch, position, self._running_splits if epoch == self._running else [])
        return _resume_state.make(self, resume)

    def load_state_dict(self, state: dict | list[dict]) -> None:
        """As chute.Loader's: a state either loader took resumes the other, in the same order, and every
        rank's states resume any world size."""
        self._epoch, self._resume_position, self._resume_splits = _resume_state.check(state, self)
        self._iteration += 1  # an iteration in progress is superseded
        self._running = None

    def errors(self) -> list[SampleError]:
        """Samples skipped so far (``on_error='skip'``), oldest first, as their batches reached this trainer."""
        return list(self._errors)

    def actor_pids(self) -> list[int]:
        """The live actors' process ids (a restarting actor answers once it is up), for diagnostics and
        fault tests."""
        return self._pool.pids()

    def actor_stats(self) -> list[dict]:
        """Each live actor's engine statistics (its decode threads' stage and CPU times, since the actor
        started; chute.Loader.stats()'s figures). An actor answers after the batches already queued on it."""
        refs = [self._pool.actors[i].engine_stats.remote() for i in self._pool.alive()]
        return ray.get(refs, timeout=self.timeout_s)

    def stats(self) -> dict:
        """Where the time went since creation or :meth:`reset_stats` (seconds): ``actor_busy_s`` (summed over
        actors: their calls that returned the batches this trainer received; an actor's engine works ahead
        of its calls, so a call lasts about a batch's making when the actor is the limit, less when it is
        not), ``transfer_s`` (``ray.get`` of ready batches:
        object-store transfer and deserialisation), ``wait_s`` (the trainer blocked in ``next()``, transfer
        included), ``consumer_s`` (the trainer's own time between batches), ``resubmitted`` (batches sent
        again after an actor died), ``repacked`` (batches joined, a copy, from two actors' batches after a
        sample skipped under ``on_error='skip'``), ``max_outstanding`` (most batches requested and not yet
        yielded); each
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
        s["actors"] = len(self._pool.alive())
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
            "repacked": 0,
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
        if getattr(self, "_pool", None) is not None:
            self._pool.kill()

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


# `chute doctor script.py` / CHUTE_DOCTOR=1 installed its hook before this import (the hook does not import
# Ray): the first RemoteLoader iterated is watched too. Only when the doctor is loaded already.
if "chute.doctor.api" in sys.modules:
    sys.modules["chute.doctor.api"].adopt_loader_class(RemoteLoader)
