"""What every native fast path of ``chute.DataLoader`` is: a :class:`Plan`, or a :class:`Fallback` saying why
there is none.

A plan yields, for each index list of the DataLoader's own batch sampler, the batch torch's DataLoader would
yield (``Plan.batches``). A path (tensor_path.py, folder_path.py) implements its epoch, whether it is
closed, what it was planned from, and planning again; which path runs is decided in plan.py.

The caller (``chute.DataLoader.__iter__``) runs each epoch as torch's iterator would: it draws
``base_seed = torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()``, then makes
``iter(loader._index_sampler)``, then calls ``plan.batches(that_iterator, base_seed=base_seed, epoch=epoch)``,
``epoch`` counting the DataLoader's epochs from 0. Passing ``base_seed`` keeps random transforms reproducible with
``generator``; without it the plan draws one from torch's global RNG. A path with random transforms keys them by
(``base_seed``, ``epoch``, sample index), which a resumed epoch (state.py) gives again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from torch.utils.data import default_collate

_log = logging.getLogger("chute.dataloader")


class Fallback:
    """Why no fast path applies; ``str()`` is the one-line explanation, ``hint`` what the user could change
    to get one (None when nothing simple would)."""

    def __init__(self, reason: str, hint: str | None = None):
        self.reason = reason
        self.hint = hint

    def __str__(self) -> str:
        return self.reason

    def __repr__(self) -> str:
        return f"Fallback({self.reason!r})"


class RaiseInPlace:
    """What a path's epoch yields in place of a batch whose fetch failed (a bad index, a bad file): the
    epoch's iterator raises ``error`` there and, on the next call, goes on with the following batch, as
    torch's DataLoader iterator does after an exception in a fetch. (A generator that raised would end.)"""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class _Epoch(Iterator):
    """``Plan.batches``' iterator: the path's generator, with :class:`RaiseInPlace` items raised."""

    def __init__(self, batches: Iterator):
        self._batches = batches

    def __next__(self):
        item = next(self._batches)
        if isinstance(item, RaiseInPlace):
            error = item.error
            del item
            raise error
        return item

    def close(self) -> None:
        self._batches.close()


class Plan:
    """A native path for one DataLoader. ``kind`` names it (``loader.stats()`` shows ``fast:<kind>``).

    A plan is made once per DataLoader, but a dataset may change between epochs (a new ``transform`` for
    progressive resizing, new tensors): each epoch first compares the attributes the plan was made from
    (by identity) and plans again when they changed. If the dataset no longer qualifies, that epoch runs
    torch's own fetch and collate in this process (same batches, Python speed) and says so in a warning."""

    kind = ""
    # What a batch the consumer keeps holds, and who frees it (stats()["held_batches"]; the table of every
    # recycler is in docs/ARCHITECTURE.md, "Held batches").
    held_batches = ""
    # What a sample that fails does, on every path, stated once: what torch's DataLoader does, raise (at
    # that sample's batch; the next call goes on with the following batch, see RaiseInPlace). The folder
    # path gives it to its engine (the native Loader's on_error).
    on_error = "raise"
    _dataset = None
    # How torch's DataLoader would collate an epoch this path cannot run natively (the dataset changed): its
    # collate_fn, which a path runs natively only when it is default_collate or the MixUp/CutMix recipe's.
    collate = staticmethod(default_collate)

    def batches(self, index_batches: Iterable[list[int]], base_seed: int | None = None, epoch: int = 0) -> Iterator:
        """Yields the collated batch of each index list, in order, exactly as torch's DataLoader would.
        ``base_seed``: the seed torch's iterator drew from ``loader.generator`` for this epoch, and ``epoch``
        its number; paths with random transforms key their RNG on them (others ignore them)."""
        return _Epoch(self._epoch(index_batches, base_seed, epoch))

    def _epoch(self, index_batches, base_seed, epoch):
        if self._closed():
            raise RuntimeError("the fast path is closed")
        if not same_objects(self._fingerprint(), self._made_from):
            new = self._replan()
            if isinstance(new, Plan):
                self.close()
                self.__dict__.update(new.__dict__)  # take over its native engine
                new.__dict__.clear()
            else:
                _log.warning(
                    "chute: the dataset changed since its fast path was planned and no longer "
                    "qualifies (%s); this epoch runs torch's fetch and collate in-process",
                    new,
                )
                return (yield from in_process(self._dataset, index_batches, self.collate))
        return (yield from self._batches(index_batches, base_seed, epoch))

    def close(self) -> None:
        """Stops native threads. Batches already yielded stay valid."""

    def stats(self) -> dict:
        """The engine's figures (chute.LoaderStats names, with its verdict) where the path runs on chute's
        decode engine; none for a path that only gathers."""
        return {}

    def __del__(self):
        self.close()

    # What a path implements: its epoch, whether it is closed, what it was planned from, planning again.
    def _batches(self, index_batches, base_seed, epoch):
        raise NotImplementedError

    def _closed(self) -> bool:
        raise NotImplementedError

    def _fingerprint(self) -> tuple:
        """The dataset's attributes this plan depends on, compared by identity each epoch."""
        raise NotImplementedError

    def _replan(self) -> Plan | Fallback:
        raise NotImplementedError


def same_objects(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y or (isinstance(x, int) and x == y) for x, y in zip(a, b))


def in_process(dataset, index_batches, collate=default_collate):
    """torch's fetch and collate (num_workers=0), for an epoch no native path can run."""
    for indices in index_batches:
        try:
            batch = collate([dataset[i] for i in indices])
        except Exception as e:  # as torch's iterator: this batch raises, the next call goes on
            yield RaiseInPlace(e)
            continue
        yield batch
