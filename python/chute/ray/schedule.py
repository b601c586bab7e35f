"""RemoteLoader's batch scheduling and fault handling: which actor makes which batch, and what happens when
an actor dies.

:class:`ActorPool` keeps the actors and their health (alive, suspect after a lost batch, dead for good).
:class:`RemoteEpoch` is one epoch: it submits the driver's batches up to ``max_inflight`` ahead, each to its
home actor, receives them in order, sends a batch lost with its actor again, and yields the batches in
epoch order (re-packed under ``on_error='skip'``: repack.py), to the consumer or to the device.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

import numpy as np
import ray
import torch
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError

from chute.errors import SampleError
from chute.ray.actor import from_wire
from chute.ray.repack import Repack

_ACTOR_LOST = (ActorDiedError, ActorUnavailableError)
SLICE_S = 0.1  # waits run in slices so that Ctrl-C is handled
_END = object()  # RemoteEpoch._next_item: the epoch has no batch left


class ActorPool:
    """The actors of a RemoteLoader and what the driver knows of their health."""

    def __init__(self, actors: list, max_restarts: int, timeout_s: float):
        self.actors = actors
        self.max_restarts, self.timeout_s = max_restarts, timeout_s
        self.dead = [False] * len(actors)  # gone for good
        self._suspect: dict[int, ray.ObjectRef] = {}  # a batch failed with the actor: its pid() probe

    def __len__(self) -> int:
        return len(self.actors)

    def alive(self) -> list[int]:
        return [i for i in range(len(self.actors)) if not self.dead[i]]

    def pids(self) -> list[int]:
        """The live actors' process ids (a restarting actor answers once it is up)."""
        pids = []
        for i in range(len(self.actors)):
            while not self.dead[i]:
                try:
                    pids.append(ray.get(self.actors[i].pid.remote(), timeout=self.timeout_s))
                    self._suspect.pop(i, None)
                    break
                except ActorDiedError:
                    self.dead[i] = True  # gone for good: killed with no_restart, or out of restarts
                except ActorUnavailableError:
                    time.sleep(SLICE_S)  # restarting
        return pids

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
                self.dead[i] = True
                del self._suspect[i]
            except ActorUnavailableError:
                self._suspect[i] = self.actors[i].pid.remote()  # still restarting: ask again

    def pick(self, load: list[int], avoid: int | None, home: int | None = None) -> int:
        """The batch's home actor when it is live, trusted and not ``avoid``; else the live actor with the
        fewest outstanding batches: one not suspect and not ``avoid`` when there is one; else a suspect one
        (a restarting actor queues the batch until it is up)."""
        self._check_suspects()
        alive = self.alive()
        if not alive:
            raise RuntimeError(
                f"all {len(self.actors)} RemoteLoader actors are dead (each died more than "
                f"max_restarts={self.max_restarts} times, or was killed with no_restart)"
            )
        trusted = [i for i in alive if i not in self._suspect]
        if home is not None and home != avoid and home in trusted:
            return home
        choice = [i for i in trusted if i != avoid] or trusted or alive
        return min(choice, key=lambda i: load[i])

    def lost(self, i: int) -> None:
        """A batch sent to actor i failed because the actor died or became unreachable."""
        if i not in self._suspect and not self.dead[i]:
            self._suspect[i] = self.actors[i].pid.remote()

    def kill(self) -> None:
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # the cluster may be gone already
                pass


class RemoteEpoch(Iterator):
    """One epoch of a RemoteLoader: submits batches up to max_inflight ahead, yields them in order.

    Batch b's home is the b-th live actor, round-robin. The first batch sent to its home actor carries the
    actor's plan (its home batches from there on), so that its engine works ahead of the calls (actor.py).
    A batch whose home is dead or suspect, or that failed with its actor, goes to the least-loaded other
    actor; an actor that failed gets a new plan with its next home batch (a restarted actor has none)."""

    def __init__(self, loader, iteration: int, epoch: int, order: np.ndarray, bounds: list):
        self._loader, self._iteration, self._epoch = loader, iteration, epoch
        self._pool: ActorPool = loader._pool
        self._order, self._bounds = order, bounds
        self._next_submit = 0
        self._next_receive = 0  # the next batch to take from the object store, in order
        self._repack = Repack(loader.batch_size, loader.drop_last)
        self._busy = 0.0  # actor time of the batches received and not yet yielded
        self._staged: deque[tuple] = deque()  # device delivery: items received, copy issued, not yielded
        self._pending: dict[int, tuple[ray.ObjectRef, int]] = {}  # batch -> (ref, actor)
        self._attempts: dict[int, int] = {}
        self._load = [0] * len(self._pool)
        self._done = False
        alive = self._pool.alive() or [0]
        self._homes = [alive[b % len(alive)] for b in range(len(bounds))]
        self._planned: set[int] = set()  # actors whose engine runs this epoch's plan

    def _plan(self, actor: int, b: int) -> np.ndarray:
        """Actor's home batches from batch b on, as one array of source indices."""
        batches = [self._bounds[c] for c in range(b, len(self._bounds)) if self._homes[c] == actor]
        return np.concatenate([self._order[lo:hi] for lo, hi in batches])

    def _submit(self, b: int, avoid: int | None = None) -> None:
        home = self._homes[b]
        i = self._pool.pick(self._load, avoid, home)
        lo, hi = self._bounds[b]
        plan = None
        if i == home and i not in self._planned:
            plan = self._plan(i, b)
            self._planned.add(i)
        ref = self._pool.actors[i].batch.remote(self._epoch, self._order[lo:hi], plan)
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
            return self._next_batch(entered + loader.timeout_s)
        finally:
            loader._last_return = time.perf_counter()
            loader._stats["wait_s"] += loader._last_return - entered

    def _next_batch(self, deadline: float):
        delivery = self._loader._delivery
        if delivery is None:
            item = self._next_item(deadline, wait=True)
            if item is _END:
                self._end()
            return self._yield(item)
        # Device delivery: copies run ahead of the consumer, up to the device prefetch, for batches that are
        # already here (the wait is for the batch the consumer asks for, never for one ahead of it).
        ended = False
        while len(self._staged) < delivery.prefetch and delivery.can_issue():
            item = self._next_item(deadline, wait=not self._staged)
            ended = item is _END
            if item is None or ended:
                break
            if item[0] == "ok":
                delivery.issue(item[1], item[2])  # holds the arrays until their copy completed
                item = ("ok", None, None, *item[3:])
            self._staged.append(item)
        if not self._staged:
            if ended:
                self._end()
            raise RuntimeError(
                f"all {delivery.slots.num_slots} device batch buffers are held by batches the consumer still "
                "references (e.g. stored in a list); release them, keep copies (tensor.clone()), or raise "
                "device_prefetch"
            )
        return self._yield(self._staged.popleft())

    def _end(self):
        self._done, self._loader._running = True, None
        raise StopIteration

    def _next_item(self, deadline: float, wait: bool):
        """The epoch's next batch: ``("ok", images, labels, position, count, actor_s)``, or ``("error",
        (index, path, reason, epoch), position)`` for a bad sample's batch under on_error='raise';
        ``_END`` after the last one; None when ``wait`` is false and it has not arrived yet. ``position``:
        the epoch position after the batch, where a resume starts."""
        loader = self._loader
        while True:
            final = self._next_receive >= len(self._bounds)
            packed = self._repack.take(final)
            if packed is not None:
                images, labels, position, joined = packed
                loader._stats["repacked"] += joined
                busy, self._busy = self._busy, 0.0
                return ("ok", images, labels, position, len(labels), busy)
            if final:
                return _END
            if not wait and not self._arrived(self._next_receive):
                return None
            b, result = self._receive(deadline)
            lo, hi = self._bounds[b]
            if result[0] == "error":
                return ("error", result[1], hi)
            _, images, labels, busy, skipped = result
            self._busy += busy
            positions = np.arange(lo, hi)
            if skipped:
                loader._errors += [SampleError(*e) for e in skipped]
                positions = positions[~np.isin(self._order[lo:hi], [e[0] for e in skipped])]
            self._repack.add(images, labels, positions)

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
            ready, _ = ray.wait([ref], timeout=SLICE_S)
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
                self._pool.lost(actor)
                self._planned.discard(actor)  # restarted, it has no plan: its next home batch brings one
                loader._stats["resubmitted"] += 1
                self._attempts[b] = self._attempts.get(b, 1) + 1
                if self._attempts[b] > (self._pool.max_restarts + 1) * len(self._pool) + 1:
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

    def _yield(self, item: tuple):
        loader = self._loader
        loader._position = item[-1] if item[0] == "error" else item[3]
        if item[0] == "error":
            raise SampleError(*item[1])
        _, images, labels, _, count, busy = item
        loader._stats["batches"] += 1
        loader._stats["samples"] += count
        loader._stats["actor_busy_s"] += busy
        if loader._delivery is not None:
            return loader._delivery.next()
        # labels: a copy of their own (as chute.Loader), so that keeping them holds no object-store memory
        return from_wire(images, loader.dtype, loader._channels_last), torch.from_numpy(labels.copy())
