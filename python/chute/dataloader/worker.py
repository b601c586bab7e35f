"""Worker process of the generic DataLoader path.

Mirrors torch's ``torch.utils.data._utils.worker._worker_loop`` (same seeding, WorkerInfo, worker_init_fn,
iterable-dataset end-of-stream and persistent-worker resume protocol, so torch's parent-side bookkeeping applies
unchanged), with two differences:

* the collated batch is written into the arena slot the parent assigned to the task (``default_collate`` stacks
  straight into it) and only a small pickle with offsets travels through the result queue;
* an error names the worker and the sample index (or batch indices) it came from;
* each reply carries the worker's RNG states after its task (state.py: what a resumed worker goes on from),
  and a resumed worker starts from the states it is given.
"""

from __future__ import annotations

import queue
import random
from dataclasses import dataclass

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import _utils
from torch.utils.data._utils import collate as _collate
from torch.utils.data._utils import signal_handling
from torch.utils.data._utils.worker import (
    ManagerWatchdog,
    WorkerInfo,
    _generate_state,
    _IterableDatasetStopIteration,
    _ResumeIteration,
)
from torch.utils.data.dataloader import _DatasetKind

from chute.dataloader import state_format as _state
from chute.dataloader.arena import SlotWriter, dumps_batch

if _utils.HAS_NUMPY:
    # Imported here, in the parent, before any fork: numpy loads numpy.random lazily, and importing in a child
    # forked while another parent thread held the import machinery can fail (KeyError in importlib's locks).
    import numpy.random  # noqa: F401


@dataclass(frozen=True)
class ArenaBatch:
    """A worker's reply for one task: the pickled batch, whose tensors sit in ``slot`` (None: torch sharing), and
    the worker's RNG states after it (``state.SEEDED`` while they are as seeded)."""

    slot: int | None
    file_size: int
    data: bytes
    rng: object = None


class _Where:
    """Where the current sample came from, for the error message (formatted only when an error happens)."""

    __slots__ = ("kind", "value")

    def __init__(self):
        self.kind = None
        self.value = None

    @property
    def where(self) -> str:
        if self.kind == "sample":
            return f" (sample index {self.value!r})"
        if self.kind == "batch":
            return f" (batch indices {_short(self.value)})"
        if self.kind == "collate":
            return f" (while collating batch indices {_short(self.value)})"
        if self.kind == "convert":
            return f" (while converting sample index {self.value!r})"
        if self.kind == "iterable":
            return " (reading the iterable dataset)"
        if self.kind == "iterable-collate":
            return " (while collating a batch of the iterable dataset)"
        return ""


def _fetch_map(dataset, index, auto_collation, ctx: _Where):
    if not auto_collation:
        ctx.kind, ctx.value = "sample", index
        return dataset[index]
    if getattr(dataset, "__getitems__", None):
        ctx.kind, ctx.value = "batch", index
        return dataset.__getitems__(index)
    ctx.kind = "sample"
    data = []
    for i in index:
        ctx.value = i
        data.append(dataset[i])
    return data


def _short(index) -> str:
    index = list(index)
    return repr(index) if len(index) <= 16 else f"[{', '.join(map(repr, index[:16]))}, ... {len(index)} total]"


class _Fetcher:
    """torch's _MapDatasetFetcher / _IterableDatasetFetcher, recording which sample is being read."""

    def __init__(self, kind, dataset, auto_collation, collate_fn, drop_last, writer: SlotWriter):
        self.kind = kind
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ctx = _Where()
        self.ended = False
        self.iterator = iter(dataset) if kind == _DatasetKind.Iterable else None
        # default_collate stacks tensors straight into the task's slot (no extra copy); torch's own tensor
        # collate would allocate a torch shared-memory file per tensor per batch here.
        self._arena_collate = None
        if collate_fn is _collate.default_collate:
            fn_map = dict(_collate.default_collate_fn_map)
            fn_map[torch.Tensor] = lambda batch, *, collate_fn_map=None: _stack_into(batch, writer)
            self._arena_collate = lambda batch: _collate.collate(batch, collate_fn_map=fn_map)

    def fetch(self, index):
        if self.iterator is not None:
            data = self._fetch_iterable(index)
        else:
            data = _fetch_map(self.dataset, index, self.auto_collation, self.ctx)
        if self.iterator is not None:
            self.ctx.kind = "iterable-collate"
        else:
            self.ctx.kind, self.ctx.value = ("collate" if self.auto_collation else "convert"), index
        data = self._arena_collate(data) if self._arena_collate is not None else self.collate_fn(data)
        self.ctx.kind = None
        return data

    def _fetch_iterable(self, index):
        if self.ended:
            raise StopIteration
        self.ctx.kind = "iterable"
        if not self.auto_collation:
            return next(self.iterator)
        data = []
        for _ in index:
            try:
                data.append(next(self.iterator))
            except StopIteration:
                self.ended = True
                break
        if len(data) == 0 or (self.drop_last and len(data) < len(index)):
            raise StopIteration
        return data


def _stack_into(batch, writer: SlotWriter):
    elem = batch[0]
    if (
        type(elem) is torch.Tensor
        and elem.layout == torch.strided
        and elem.device.type == "cpu"
        and not elem.is_nested
        and all(x.shape == elem.shape for x in batch)
    ):
        out = writer.alloc_tensor((len(batch), *elem.shape), elem.dtype)
        if out is not None:
            return torch.stack(batch, 0, out=out)
        return torch.stack(batch, 0)
    return _collate.collate_tensor_fn(batch)  # torch's errors for nested / mismatched tensors


def worker_loop(
    dataset_kind,
    dataset,
    index_queue,
    data_queue,
    done_event,
    auto_collation,
    collate_fn,
    drop_last,
    base_seed,
    init_fn,
    worker_id,
    num_workers,
    slot_fds,
    rng_state=None,
) -> None:
    try:
        signal_handling._set_worker_signal_handlers()
        torch.multiprocessing._set_thread_name("pt_data_worker")  # as torch names it, for tools
        torch.set_num_threads(1)
        seed = base_seed + worker_id
        random.seed(seed)
        torch.manual_seed(seed)
        if _utils.HAS_NUMPY:
            import numpy as np

            np.random.seed(_generate_state(base_seed, worker_id))

        # torch.utils.data.get_worker_info() (and chute.get_worker_info, the same function) work in here.
        _utils.worker._worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)

        writer = SlotWriter(slot_fds)
        init_exception = None
        fetcher = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = _Fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last, writer)
        except Exception:
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id} (worker_init_fn)")
        seeded = _state.worker_rng()  # as seeding and worker_init_fn left them

        def rng_now():
            now = _state.worker_rng()
            return _state.SEEDED if _state.same_worker_rng(now, seeded) else now

        if rng_state not in (None, _state.SEEDED):  # a resumed worker: where it was
            _state.set_worker_rng(rng_state)

        iteration_end = False
        watchdog = ManagerWatchdog()
        while watchdog.is_alive():
            try:
                r = index_queue.get(timeout=_utils.MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(r, _ResumeIteration):
                data_queue.put((r, (worker_id, rng_now())))
                iteration_end = False
                fetcher = _Fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last, writer)
                continue
            if r is None:
                break
            if done_event.is_set() or iteration_end:
                continue
            idx, index, slot, snapshot = r
            if init_exception is not None:
                data, init_exception = init_exception, None
            else:
                writer.begin(slot)
                try:
                    if fetcher is None:
                        raise RuntimeError(
                            f"DataLoader worker process {worker_id} failed to start (see the first error)"
                        )
                    batch = fetcher.fetch(index)
                    payload = dumps_batch(batch, writer)  # may grow the slot: read its size after
                    data = ArenaBatch(slot, writer.file_size(), payload, rng_now() if snapshot else None)
                    del batch, payload
                except Exception as e:
                    if isinstance(e, StopIteration) and dataset_kind == _DatasetKind.Iterable:
                        data = _IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                    else:
                        where = fetcher.ctx.where if fetcher is not None else ""
                        data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}{where}")
                        data.chute_rng = rng_now() if snapshot else None
                writer.begin(None)
            data_queue.put((idx, data))
            del data, idx, index, r
    except KeyboardInterrupt:
        pass
    if done_event.is_set():
        data_queue.cancel_join_thread()
        data_queue.close()
