"""The resume state of ``chute.DataLoader``: torchdata StatefulDataLoader's ``state_dict()`` /
``load_state_dict()``, exact on every path (docs/ORDER.md, "Resuming chute.DataLoader").

An epoch's batches are a function of what this module records, each where it lives:

* the batch sampler's index lists: replayed from the epoch's start under the RNG states it began with
  (torch's global RNG, ``loader.generator`` and the samplers' own generators, recorded when each epoch's
  iterator starts, after its base seed), the batches the consumer received skipped. Replaying draws what the
  uninterrupted run drew, so those generators end where its would be; the global RNG is replayed in a fork
  and left as the caller has it (it is the caller's: restore it with the rest of the checkpoint);
* the epoch's base seed (drawn by torch's iterator: the workers' seeds, ``base_seed + worker_id``, and with
  the epoch's number the key of the ImageFolder path's augmentation);
* each worker's RNG states (torch's, ``random``'s, numpy's), generic path: every reply carries the worker's
  states after that batch when its dataset changed them (nothing when they are as seeded); the state keeps,
  per worker, those after the last batch the consumer received, and a resumed worker starts from them;
* the batches made ahead (prefetched, in flight, ready but not taken): not in the state. Positions count what
  the consumer received (or had raised in place of a batch), so those are made again, the same.

Iterable-style datasets have no index to skip to: their epoch is replayed from its start and the batches the
consumer had received are made again and dropped (torchdata's fast-forward). ``snapshot_every_n_steps`` is
StatefulDataLoader's argument; here every step is a snapshot (a worker's states are about 10 KB, sent only
when its dataset draws random numbers), so a state never needs a replay of batches on a map-style dataset.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import weakref
from dataclasses import dataclass

import torch
from torch.utils.data.dataloader import _DatasetKind

from chute.dataloader.state_format import (
    b64,
    check,
    describe,
    encode_worker_rng,
    generator_states,
    set_generator_states,
    set_worker_rng,
    unb64,
    worker_rng,
)

__all__ = ["Tracker", "replaying"]

_ITERABLE = _DatasetKind.Iterable


@dataclass
class Epoch:
    number: int  # epochs started before this one
    base_seed: int
    rng: dict  # {"global": ..., "generators": [...]} when this epoch's iterator started
    consumed: int = 0  # batches the consumer received, or had raised in their place
    ended: bool = False  # the consumer saw its end (StopIteration)
    # Per worker (generic path), raw or encoded, None as seeded: the RNG states it started the epoch with, those
    # after its last batch the consumer received (as far as its replies told), and those at the last snapshot,
    # the `snapshot` first batches of the epoch received (every step by default: snapshot == consumed).
    start_workers: list | None = None
    views: list | None = None
    snapshot: int = 0
    workers: list | None = None


@dataclass
class Resumed:
    """What :meth:`Tracker.begin` prepared for a resumed iterator: the epoch's index lists from its snapshot on
    (None: the epoch was over; the next one starts whole), and the RNG states the replay left, which the sampler
    iterator torch's base makes again must not change."""

    epoch: Epoch
    sampler_iter: object
    generators: list[str]
    global_rng: torch.Tensor
    iterable: bool


class Tracker:
    """One per DataLoader: its epochs, the one in progress as the consumer sees it, and a loaded state that
    waits for the next iterator. ``every``: snapshot_every_n_steps (workers send their RNG states with the
    batches that end a snapshot interval; a state between snapshots makes the batches since again, dropped)."""

    def __init__(self, loader, every: int = 1):
        # Weakly: a DataLoader dropped must go at once (its fast path's engine threads with it), not at the
        # next garbage collection of a cycle.
        self._loader = weakref.ref(loader)
        self.every = every
        self.epochs = 0  # epochs started
        self.current: Epoch | None = None
        # The iterator whose batches count (a newer one supersedes it); weakly: dropping an iterator must stop
        # its workers at once, as in torch.
        self._iterator = lambda: None
        self.pending: dict | None = None  # a loaded state (checked)
        self._resumed: Resumed | None = None

    @property
    def loader(self):
        return self._loader()

    # -- called by the iterators (iterator.py), in this order --

    def before_iterator(self):
        """Before torch's iterator base draws the epoch's base seed: the global RNG, given back when resuming."""
        state = self.pending
        if state is None:
            return None
        if state["epoch"] is None:  # taken before any epoch: the generators as they were, then a first epoch
            set_generator_states(self.loader, state["rng"]["generators"])
            self.epochs, self.pending = state["epochs"], None
            return None
        _check_sampler_epoch(self.loader, state["rng"].get("sampler_epoch"))  # (the state stays loaded)
        return torch.get_rng_state()

    def begin(self, it, token) -> list | None:
        """After torch's iterator base made the iterator (and drew a base seed): a resumed iterator replays the
        epoch's sampler to its snapshot and takes the epoch's base seed, its construction's draws undone.
        Returns each worker's RNG states to start from (None: as seeded)."""
        self._iterator = weakref.ref(it)
        state, self.pending = self.pending, None
        self._resumed = None
        if state is None:
            return None
        torch.set_rng_state(token)  # the draw of torch's base seed from the global RNG is given back
        saved = state["epoch"]
        epoch = Epoch(state["epochs"], saved["base_seed"], state["rng"], saved["consumed"], saved["ended"])
        epoch.start_workers, epoch.snapshot, epoch.workers = saved["start_workers"], saved["snapshot"], saved["workers"]
        iterable = it._dataset_kind == _ITERABLE
        sampler_iter = None
        if not epoch.ended:  # (an iterable dataset's sampler draws nothing: its epoch is replayed from the start)
            sampler_iter = _replay(self.loader, it, epoch.rng, 0 if iterable else epoch.snapshot)
            if sampler_iter is None:  # it received the last batch, not yet the end: an iterator at its end
                sampler_iter = iter(())
        elif not iterable:  # the consumer saw the epoch's end: its generators where the end left them
            _replay(self.loader, it, epoch.rng, epoch.consumed)
        self._resumed = Resumed(epoch, sampler_iter, generator_states(self.loader), torch.get_rng_state(), iterable)
        persistent = self.loader.persistent_workers and self.loader.num_workers > 0
        if sampler_iter is not None or persistent:
            it._base_seed = epoch.base_seed  # the epoch's; persistent workers keep theirs into the next
        else:  # the epoch was over: the next one draws its own, where an uninterrupted run's next iterator does
            it._base_seed = torch.empty((), dtype=torch.int64).random_(generator=self.loader.generator).item()
            self._resumed.generators = generator_states(self.loader)
            self._resumed.global_rng = torch.get_rng_state()
            return None
        return epoch.start_workers if iterable and not epoch.ended else epoch.workers

    def start_epoch(self, it, workers: list | None = None) -> int:
        """After the epoch's sampler iterator was made (each epoch; persistent workers' ``_reset`` too):
        records the epoch, or installs the resumed one's (``it._sampler_iter`` replaced; ``it._chute_offset``:
        its first batch's number in the epoch). ``workers``: each worker's RNG states now. Returns how many
        batches to make again and drop (those received since the snapshot)."""
        self._iterator = weakref.ref(it)
        resumed, self._resumed = self._resumed, None
        it._chute_offset = 0
        if resumed is not None:  # the replay's RNG states, whatever making the sampler iterator again drew
            set_generator_states(self.loader, resumed.generators)
            torch.set_rng_state(resumed.global_rng)
        if resumed is None or resumed.sampler_iter is None:
            if resumed is not None:  # the epoch was over: the next one, its workers where the last left them
                self.epochs = resumed.epoch.number + 1
                workers = resumed.epoch.workers if self.loader.persistent_workers else None
            epoch = Epoch(self.epochs, int(it._base_seed), self._rng_now(it))
            epoch.start_workers = epoch.workers = None if workers is None else list(workers)
            epoch.views = None if workers is None else list(workers)
            self.current = epoch
            self.epochs += 1
            return 0
        epoch = resumed.epoch
        self.epochs = epoch.number + 1
        self.current = epoch
        it._sampler_iter = resumed.sampler_iter
        if resumed.iterable:  # made again from the epoch's start
            epoch.snapshot, epoch.workers = 0, epoch.start_workers
        it._chute_offset = epoch.snapshot
        epoch.views = None if epoch.workers is None else list(epoch.workers)
        redo, epoch.consumed = epoch.consumed - epoch.snapshot, epoch.snapshot
        return redo

    def wants_snapshot(self, it, batch: int) -> bool:
        """Whether the worker making the epoch's batch ``batch`` sends its RNG states with it: those that end a
        snapshot interval and the epoch's last (round robin: the last batch before a snapshot step of each
        worker); all of them by default."""
        workers, every = it._num_workers, self.every
        if every == 1 or it._dataset_kind == _ITERABLE:
            return every == 1
        try:
            total = len(it._index_sampler)
        except TypeError:
            return True
        return batch >= total - workers or (batch + workers) // every > batch // every

    def delivered(self, it, worker: int | None = None, rng=None) -> None:
        """A batch reached the consumer (or its error did, in its place); ``rng``: the worker's RNG states
        after it (SEEDED: as seeded), when its reply carried them."""
        if it is not self._iterator() or self.current is None:
            return  # a superseded iterator
        epoch = self.current
        epoch.consumed += 1
        if worker is not None and rng is not None:
            if epoch.views is None:
                epoch.views = [None] * it._num_workers
            epoch.views[worker] = rng
        if worker is None or epoch.consumed % self.every == 0:  # (no workers: every step is one)
            self._snapshot(epoch)

    def fetched(self, it, worker: int | None = None, rng=None) -> None:
        """A batch (or its error) was taken from the path for the consumer: it is the consumer's at
        :meth:`handed`, the next call that returns or raises in its place (a pin thread holds one batch between
        the two, so a state taken then does not count it)."""
        pending = getattr(it, "_chute_pending", None)
        if pending is None:
            pending = it._chute_pending = collections.deque()
        pending.append((worker, rng))

    def handed(self, it) -> None:
        """The oldest batch :meth:`fetched` reached the consumer (or its error did)."""
        pending = getattr(it, "_chute_pending", None)
        if pending:
            self.delivered(it, *pending.popleft())

    @staticmethod
    def forget_fetched(it) -> None:
        """Batches fetched ahead and dropped (an epoch left mid-way): never the consumer's."""
        pending = getattr(it, "_chute_pending", None)
        if pending:
            pending.clear()

    def ended(self, it) -> None:
        """The consumer saw the epoch's end (its workers' states came with its last batches)."""
        if it is self._iterator() and self.current is not None:
            self.current.ended = True
            self._snapshot(self.current)

    @staticmethod
    def _snapshot(epoch: Epoch) -> None:
        epoch.snapshot = epoch.consumed
        epoch.workers = None if epoch.views is None else list(epoch.views)

    def _rng_now(self, it=None) -> dict:
        rng = {"global": b64(torch.get_rng_state().numpy().tobytes()), "generators": generator_states(self.loader)}
        rng["sampler_epoch"] = _sampler_epoch(self.loader)
        if it is not None and it._dataset_kind == _ITERABLE and it._num_workers == 0:
            # An iterable dataset in this process draws from its RNGs: a resumed epoch replays under these.
            rng["process"] = encode_worker_rng(worker_rng())
        return rng

    # -- state_dict / load_state_dict --

    def state_dict(self, path: str) -> dict:
        if self.pending is not None:
            return self.pending  # loaded, not yet resumed: the loader is still where it says
        loader = self.loader
        if loader.num_workers > 0 and not loader.in_order:
            raise ValueError(
                "chute.DataLoader.state_dict() with in_order=False: batches come as they finish, so no position "
                "says which were delivered; checkpoint with in_order=True (the default)"
            )
        state = describe(loader, path)
        cur = self.current
        if cur is None:
            state.update(epochs=self.epochs, epoch=None, rng={"global": None, "generators": generator_states(loader)})
            return state
        encode = lambda ws: None if ws is None else [encode_worker_rng(w) for w in ws]  # noqa: E731
        state["epochs"] = cur.number
        state["epoch"] = {
            "base_seed": cur.base_seed,
            "consumed": cur.consumed,
            "ended": cur.ended,
            "snapshot": cur.snapshot,
            "start_workers": encode(cur.start_workers),
            "workers": encode(cur.workers),
        }
        state["rng"] = cur.rng
        return state

    def load_state_dict(self, state, path: str) -> None:
        self.pending = check(state, self.loader, path)
        self._resumed = None


def _sampler_epoch(loader) -> int | None:
    """A sampler's own epoch (DistributedSampler's ``set_epoch``), which keys its order; None without one."""
    epoch = getattr(loader.sampler, "epoch", None)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def _check_sampler_epoch(loader, taken: int | None) -> None:
    now = _sampler_epoch(loader)
    if taken is not None and now != taken:
        raise ValueError(
            f"the state's epoch was taken with {type(loader.sampler).__name__}.epoch={taken}, this DataLoader's "
            f"sampler is at epoch {now}: call sampler.set_epoch({taken}) before iterating, as the interrupted run did"
        )


@contextlib.contextmanager
def replaying(rng: dict):
    """This process's RNGs (torch's, random's, numpy's) as an iterable dataset's epoch began with them, for
    making again the batches the consumer had (num_workers=0); the caller's are put back after."""
    if rng.get("process") is None:  # (a state of a DataLoader that ran the dataset in workers)
        yield
        return
    saved = worker_rng()
    set_worker_rng(rng["process"])
    try:
        yield
    finally:
        set_worker_rng(encode_worker_rng(saved))


def _replay(loader, it, rng: dict, skip: int):
    """The epoch's index lists from batch ``skip`` on (None if there are none: the epoch was over), the batch
    sampler iterated again under the RNG states the epoch began with. The generators end where the
    uninterrupted run's are; the global RNG is left as the caller has it."""
    set_generator_states(loader, rng["generators"])
    with torch.random.fork_rng(devices=[]):
        if rng["global"] is not None:
            torch.set_rng_state(torch.frombuffer(bytearray(unb64(rng["global"], "global RNG")), dtype=torch.uint8))
        sampler_iter = iter(it._index_sampler)
        for _ in itertools.islice(sampler_iter, skip):
            pass
        try:  # the next batch, drawn here too: torch's samplers draw their order at their first next()
            first = next(sampler_iter)
        except StopIteration:
            return None
    return itertools.chain([first], sampler_iter)
