"""chute.DataLoader: torch's DataLoader, with chute's iterators underneath.

A subclass of ``torch.utils.data.DataLoader``: the constructor, its validation errors, ``len()``, the default
samplers and batch sampler, and attribute rules are torch's own. Only iteration differs:

1. ``fastpath.plan(self)`` (once per loader) picks a native fast path when the dataset allows it;
2. otherwise the generic path: torch's in-process iterator for ``num_workers=0``, or chute's worker processes
   that collate into a reusable shared-memory arena (iterator.py, worker.py, arena.py).

``loader.stats()`` says which path runs and why.
"""

from __future__ import annotations

import functools
import logging

import torch.utils.data

from chute.dataloader import fastpath
from chute.dataloader.iterator import PlanIter, SingleProcessIter, start_workers

log = logging.getLogger("chute.dataloader")


class DataLoader(torch.utils.data.DataLoader):
    __doc__ = (
        "Drop-in replacement for :class:`torch.utils.data.DataLoader` (same arguments, same behaviour).\n\n"
        "Batches from worker processes arrive in a reused shared-memory arena instead of one shared-memory file "
        "per tensor; with ``pin_memory=True`` and CUDA, each batch is copied into torch's pinned memory as torch "
        "does (on the iterating thread), so torch fences its reuse against every copy. Native fast paths are used where the dataset allows; see ``stats()``.\n\n"
        + (torch.utils.data.DataLoader.__doc__ or "")
    )

    @functools.wraps(torch.utils.data.DataLoader.__init__)  # torch's signature, for help() and inspect
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._chute_plan = None
        self._chute_stats = {"batches": 0, "arena_batches": 0, "shared_batches": 0, "arena_slots": 0}

    def _plan(self):
        if self._chute_plan is None:
            self._chute_plan = fastpath.plan(self)
            if isinstance(self._chute_plan, fastpath.Fallback):
                log.info("chute.DataLoader: generic path (%s)", self._chute_plan)
            else:
                log.info("chute.DataLoader: native fast path %r", self._chute_plan.kind)
        return self._chute_plan

    def __iter__(self):
        plan = self._plan()
        if isinstance(plan, fastpath.Plan):
            return PlanIter(self, plan)
        return super().__iter__()  # torch's: persistent workers reuse self._iterator

    def _get_iterator(self):
        if self.num_workers == 0:
            return SingleProcessIter(self)
        self.check_worker_number_rationality()
        return start_workers(self)

    def stats(self) -> dict:
        """Which path runs (``"generic"`` or ``"fast:<kind>"``), why not a fast one, and batch counters.

        ``arena_batches`` came through chute's shared-memory arena, ``shared_batches`` through torch's per-tensor
        sharing (all arena slots were held by live batches, or the platform has no memfd).
        """
        plan = self._plan()
        fast = isinstance(plan, fastpath.Plan)
        return {
            "path": f"fast:{plan.kind}" if fast else "generic",
            "fallback_reason": None if fast else str(plan),
            "num_workers": 0 if fast else self.num_workers,
            **(plan.stats() if fast else {}),  # the engine's figures, where the path runs on it (chute.LoaderStats names)
            **self._chute_stats,
        }
