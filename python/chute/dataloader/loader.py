"""chute.DataLoader: torch's DataLoader, with chute's iterators underneath.

A subclass of ``torch.utils.data.DataLoader``: the constructor, its validation errors, ``len()``, the default
samplers and batch sampler, and attribute rules are torch's own. Only iteration differs:

1. ``plan.choose(self)`` (the seam, once per loader) picks a native fast path when the dataset allows it:
   tensor_path.py or folder_path.py (with translate.py, shared with the doctor);
2. otherwise the generic path: torch's in-process iterator for ``num_workers=0``, or chute's worker processes
   that collate into a reusable shared-memory arena (iterator.py, worker.py, arena.py).

``loader.stats()`` says which path runs and why, how batches are pinned and what a kept batch holds.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings

import torch.utils.data

from chute.dataloader import plan as seam
from chute.dataloader.base import Fallback, Plan
from chute.dataloader.iterator import MultiProcessIter, PlanIter, SingleProcessIter, start_workers
from chute.dataloader.state import Tracker

log = logging.getLogger("chute.dataloader")


class DataLoader(torch.utils.data.DataLoader):
    __doc__ = (
        "Drop-in replacement for :class:`torch.utils.data.DataLoader` (same arguments, same behaviour).\n\n"
        "Batches from worker processes arrive in a reused shared-memory arena instead of one shared-memory file "
        "per tensor; with ``pin_memory=True`` and CUDA, each batch is copied into torch's pinned memory as torch "
        "does (on a pin thread, one batch ahead of the loop), so torch fences its reuse against every copy. "
        "Native fast paths are used where the dataset allows; see ``stats()``.\n\n"
        "``state_dict()`` / ``load_state_dict()`` checkpoint it mid-epoch as torchdata's ``StatefulDataLoader`` does "
        "(``snapshot_every_n_steps`` is accepted): a loader built the same way resumes with exactly the batches an "
        "uninterrupted run would yield next (docs/ORDER.md).\n\n" + (torch.utils.data.DataLoader.__doc__ or "")
    )

    @functools.wraps(torch.utils.data.DataLoader.__init__)  # torch's signature, for help() and inspect
    def __init__(self, *args, **kwargs):
        # torch checks num_workers against the CPUs in its constructor and warns about the worker processes
        # it "will create"; a fast path creates none, so the check waits for the generic path's iterator.
        self._chute_constructing = True
        # prefetch_factor is keyword-only in torch's signature: given here or not at all. torch's constructor
        # turns an unset one into 2 per worker; the ImageFolder fast path keeps an explicit one (torch's
        # meaning: prefetch_factor * num_workers batches ahead) and runs automatic prefetch otherwise.
        self._chute_prefetch_factor = kwargs.get("prefetch_factor")
        # StatefulDataLoader's: how often workers send their RNG states (state.py); None, as 1, every step.
        snapshot = kwargs.pop("snapshot_every_n_steps", 1)
        if snapshot is not None and (not isinstance(snapshot, int) or isinstance(snapshot, bool) or snapshot < 1):
            raise ValueError(f"snapshot_every_n_steps must be a positive integer or None, got {snapshot!r}")
        self.snapshot_every_n_steps = snapshot
        self._chute_tracker = Tracker(self, snapshot or 1)
        try:
            super().__init__(*args, **kwargs)
        finally:
            self._chute_constructing = False
        self._chute_plan = None
        self._chute_pinning: str | None = None  # stats()["pinning"], set by each iterator as torch decides it
        self._chute_stats = {"batches": 0, "arena_batches": 0, "shared_batches": 0, "arena_slots": 0}
        if self.num_workers > 0:
            # torch warns here when num_workers exceeds the CPUs it suggests: so does chute, unless a fast path
            # will run (planned now, only in that case), which starts no worker processes.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                super().check_worker_number_rationality()
            if caught and not isinstance(self._plan(), Plan):
                for w in caught:
                    warnings.warn(w.message, w.category, stacklevel=2)

    def check_worker_number_rationality(self) -> None:
        if not getattr(self, "_chute_constructing", False):
            super().check_worker_number_rationality()

    def _plan(self):
        if self._chute_plan is None:
            self._chute_plan = plan = seam.choose(self)
            if isinstance(plan, Fallback):
                if os.environ.get("CHUTE_FAST_PATHS", "1") == "0":  # the user's own choice: nothing to change
                    log.info("chute.DataLoader: generic path (%s)", plan)
                else:  # once per DataLoader: the user expected chute's speed and gets torch's
                    log.warning(
                        "chute.DataLoader: no native fast path, batches come at torch's speed: %s. %s",
                        plan,
                        f"To get one: {plan.hint}."
                        if plan.hint
                        else "chute.DataLoader(...).stats()['fallback_reason'] repeats this",
                    )
            else:
                log.info("chute.DataLoader: native fast path %r", plan.kind)
        return self._chute_plan

    def __iter__(self):
        plan = self._plan()
        if isinstance(plan, Plan):
            return PlanIter(self, plan)
        return super().__iter__()  # torch's: persistent workers reuse self._iterator

    def _get_iterator(self):
        if self.num_workers == 0:
            return SingleProcessIter(self)
        self.check_worker_number_rationality()
        return start_workers(self)

    def state_dict(self) -> dict:
        """Where the DataLoader is, as torchdata's ``StatefulDataLoader.state_dict()``: a small JSON-serialisable
        dict. :meth:`load_state_dict` of it on a DataLoader built the same way makes the next ``iter()`` yield
        exactly the batches this one's would have yielded next: the rest of the epoch in progress (batches made
        ahead and not yet received are made again), or after its last batch the next epoch. On every path:
        the sampler's order and the generators' states, the epoch's base seed, each worker's RNG states."""
        return self._chute_tracker.state_dict(self._path_name())

    def load_state_dict(self, state_dict: dict) -> None:
        """Resumes from :meth:`state_dict` at the next ``iter()``. A state of another dataset size, batch size,
        sampler, generator seed, path, ... is a ValueError naming the difference. ``{}`` changes nothing (as in
        torchdata)."""
        if isinstance(state_dict, dict) and not state_dict:
            return
        self._chute_tracker.load_state_dict(state_dict, self._path_name())
        self._iterator = None  # persistent workers: the next iter() starts them afresh, where the state says

    def _path_name(self) -> str:
        plan = self._plan()
        return f"fast:{plan.kind}" if isinstance(plan, Plan) else "generic"

    def stats(self) -> dict:
        """Which path runs (``"generic"`` or ``"fast:<kind>"``), why not a fast one, its pinning and held-batch
        policy, and batch counters.

        ``num_workers_requested`` is the argument given, ``num_workers`` the worker processes that run
        (none on a fast path: native threads do the work).

        ``arena_batches`` came through chute's shared-memory arena, ``shared_batches`` through torch's per-tensor
        sharing (all arena slots were held by live batches, or the platform has no memfd).

        ``pinning``: how batches are pinned, as torch's iterator decided when iteration last started (the same
        rule and the same copy on every path, on a pin thread or in line: pinning.py); before any iteration,
        what ``pin_memory`` asks for. ``held_batches``: what a batch the consumer keeps holds, and who frees it (the table of
        every recycler is in docs/ARCHITECTURE.md).
        """
        plan = self._plan()
        fast = isinstance(plan, Plan)
        if fast:
            held = plan.held_batches
        else:
            held = (MultiProcessIter if self.num_workers > 0 else SingleProcessIter).held_batches
        pinning = self._chute_pinning or (
            "pin_memory=True: decided when iteration starts" if self.pin_memory else "none"
        )
        return {
            "path": self._path_name(),
            "fallback_reason": None if fast else str(plan),
            "pinning": pinning,
            "held_batches": held,
            "num_workers_requested": self.num_workers,
            "num_workers": 0 if fast else self.num_workers,  # worker processes that run
            **(
                plan.stats() if fast else {}
            ),  # the engine's figures, where the path runs on it (chute.LoaderStats names)
            **self._chute_stats,
        }
