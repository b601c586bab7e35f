"""Iterators of chute.DataLoader.

* ``SingleProcessIter`` (num_workers=0): torch's in-process iterator, unchanged, plus chute's counters.
* ``MultiProcessIter``: torch's multi-process iterator's bookkeeping (task order, in_order=False, prefetch,
  persistent-worker resume, timeout, worker-death detection through SIGCHLD and liveness polls, shutdown) with
  chute's workers (worker.py) and transport: each task carries an arena slot (arena.py) that the worker collates
  into, and the batch comes back as zero-copy views of that slot. With pin_memory the batch is then copied into
  torch's pinned blocks (torch's own pin_memory(), on this thread), whose reuse torch fences against every copy.
* ``PlanIter``: a native fast path (plan.py chooses it) behind torch's seed and sampler protocol.

Every one is a ``torch.utils.data.dataloader._BaseDataLoaderIter``: torch's base decides pinning (from
``pin_memory`` and the current accelerator) for every path, and each records the decision for ``stats()``
(:func:`record_pinning`).
"""

from __future__ import annotations

import itertools
import pickle
import threading

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import _utils
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _DatasetKind,
    _MultiProcessingDataLoaderIter,
    _sharding_worker_init_fn,
    _SingleProcessDataLoaderIter,
)
from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

from chute.dataloader import arena as _arena
from chute.dataloader import plan as _seam
from chute.dataloader.worker import ArenaBatch, _fetch_map, _Where, worker_loop

# Each live iterator's queues, held from outside the iterator. When the garbage collector frees an iterator caught
# in a reference cycle (an exception's traceback, for one), the queues would otherwise be freed in the same pass
# and their finalizers close the feeder threads *before* the iterator's __del__ sends the workers their stop
# message: the workers never hear it, and torch's shutdown waits out a 5 s join per worker. With the queues held
# here until shutdown has run, a garbage-collected iterator stops its workers in milliseconds.
_LIVE_QUEUES: dict[int, tuple] = {}

# Slots beyond the tasks in flight (prefetch_factor * num_workers): the batch the user holds and the next one.
SPARE_SLOTS = 2


def record_pinning(it: _BaseDataLoaderIter, loader) -> None:
    """What torch's iterator base decided about pinning, for ``loader.stats()["pinning"]``."""
    loader._chute_pinning = _seam.pinning(it._pin_memory_device if it._pin_memory else None)


class SingleProcessIter(_SingleProcessDataLoaderIter):
    """torch's in-process iterator; an error from the dataset or collate_fn also gets a note naming the sample."""

    held_batches = "fresh tensors: torch's collate makes each batch; nothing is recycled"

    def __init__(self, loader):
        super().__init__(loader)
        record_pinning(self, loader)
        self._stats = loader._chute_stats

    def _next_data(self):
        index = self._next_index()  # may raise StopIteration
        if self._dataset_kind == _DatasetKind.Iterable:
            data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
        else:
            where = _Where()
            try:
                data = _fetch_map(self._dataset, index, self._auto_collation, where)
                where.kind, where.value = ("collate" if self._auto_collation else "convert"), index
                data = self._collate_fn(data)
            except Exception as e:
                # The exception itself is unchanged (type, message, traceback), as torch raises it.
                e.add_note(f"chute.DataLoader: in-process loading failed{where.where}")
                raise
        if self._pin_memory:
            data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)
        self._stats["batches"] += 1
        return data


def _out_of_descriptors(e: BaseException) -> bool:
    import errno

    return isinstance(e, OSError) and (e.errno in (errno.EMFILE, errno.ENFILE) or "Too many open files" in str(e))


def _descriptor_hint(num_workers: int) -> str:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    return (
        f"chute.DataLoader: out of file descriptors. Its {num_workers} worker processes each hold pipes and "
        f"queues, and batches travel through shared memory; the per-process limit is {limit} open files "
        f"(hard limit {'unlimited' if hard == resource.RLIM_INFINITY else hard}). Raise it with `ulimit -n` "
        "(or resource.setrlimit(resource.RLIMIT_NOFILE, ...)), or lower num_workers or prefetch_factor."
    )


def start_workers(loader) -> MultiProcessIter:
    """MultiProcessIter(loader), with running out of descriptors while starting the workers raised as
    chute.ResourceError naming `ulimit -n`, instead of torch's bare EMFILE."""
    try:
        return MultiProcessIter(loader)
    except OSError as e:
        if not _out_of_descriptors(e):
            raise
        from chute.errors import ResourceError

        raise ResourceError(e.errno, f"{e.strerror or e}: {_descriptor_hint(loader.num_workers)}") from e


class MultiProcessIter(_MultiProcessingDataLoaderIter):
    held_batches = (
        "shared-memory arena: a batch views a reused slot, back to the arena when its tensors die; "
        "with every slot held, torch's per-tensor shared memory (freed with the batch)"
    )

    def __init__(self, loader):
        _BaseDataLoaderIter.__init__(self, loader)  # torch's seed draw, sampler iterator and pin_memory warnings
        record_pinning(self, loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        self._stats = loader._chute_stats
        if self._num_workers <= 0 or self._prefetch_factor <= 0:
            self._shutdown = True  # nothing started: torch's __del__ has no workers to stop
            raise AssertionError("MultiProcessIter needs num_workers > 0 and prefetch_factor > 0")
        # Workers start as torch starts them: the context asked for, else torch's default (fork on Linux),
        # whatever chute threads run. chute's native threads stand still across each fork (ForkGate,
        # cpp/include/chute/base/fork_gate.h) and its engines are inert in the child (fork.h), so a fork is
        # safe, and a script without a main guard never re-runs in a forkserver worker.
        ctx = loader.multiprocessing_context or torch.multiprocessing

        self._worker_init_fn = loader.worker_init_fn
        if isinstance(self._dataset, (IterDataPipe, MapDataPipe)):
            import functools

            self._worker_init_fn = functools.partial(
                _sharding_worker_init_fn, self._worker_init_fn, self._world_size, self._rank
            )

        self._arena = None
        if _arena.supported():
            self._arena = _arena.Arena(self._prefetch_factor * self._num_workers + SPARE_SLOTS)
        self._slot_of_task: dict[int, int] = {}
        self._stats["arena_slots"] = self._arena.num_slots if self._arena else 0
        handles = self._arena.handles() if self._arena else []

        self._worker_result_queue = ctx.Queue()
        self._worker_pids_set = False
        self._shutdown = False
        self._workers_done_event = ctx.Event()
        self._index_queues = []
        self._workers = []
        for i in range(self._num_workers):
            index_queue = ctx.Queue()
            index_queue.cancel_join_thread()
            w = ctx.Process(
                target=worker_loop,
                args=(
                    self._dataset_kind,
                    self._dataset,
                    index_queue,
                    self._worker_result_queue,
                    self._workers_done_event,
                    self._auto_collation,
                    self._collate_fn,
                    self._drop_last,
                    self._base_seed,
                    self._worker_init_fn,
                    i,
                    self._num_workers,
                    handles,
                ),
            )
            w.daemon = True
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        self._data_queue = self._worker_result_queue
        _LIVE_QUEUES[id(self)] = (self._index_queues, self._worker_result_queue)

        _utils.signal_handling._set_worker_pids(id(self), tuple(w.pid for w in self._workers))
        _utils.signal_handling._set_SIGCHLD_handler()
        self._worker_pids_set = True
        self._reset(loader, first_iter=True)

    # torch's _reset, releasing the slots of replies it throws away between epochs (persistent workers).
    def _reset(self, loader, first_iter=False) -> None:
        _BaseDataLoaderIter._reset(self, loader, first_iter)
        for info in getattr(self, "_task_info", {}).values():
            if len(info) == 2:
                self._drop_reply(info[1])
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info = {}
        self._tasks_outstanding = 0
        self._workers_status = [True for _ in range(self._num_workers)]
        self._workers_num_tasks = [0 for _ in range(self._num_workers)]
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            for idx in range(self._num_workers):
                self._index_queues[idx].put(_utils.worker._ResumeIteration(self._shared_seed))
            resume_iteration_cnt = self._num_workers
            while resume_iteration_cnt > 0:
                return_idx, return_data = self._get_data()
                if isinstance(return_idx, _utils.worker._ResumeIteration):
                    resume_iteration_cnt -= 1
                else:
                    self._drop_reply(return_data)
            # Tasks a worker skipped after its iterable dataset ended never got a reply: their slots are free.
            for slot in self._slot_of_task.values():
                self._arena.release(slot)
            self._slot_of_task.clear()
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _drop_reply(self, data) -> None:
        if isinstance(data, ArenaBatch) and data.slot is not None:
            self._arena.release(data.slot)

    def _get_data(self):
        # torch's, without the pin-memory thread branch (there is no such thread).
        if self._timeout > 0:
            success, data = self._try_get_data(self._timeout)
            if success:
                return data
            raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
        while True:
            success, data = self._try_get_data()
            if success:
                return data

    def _try_get_data(self, timeout=_utils.MP_STATUS_CHECK_INTERVAL):
        success, data = super()._try_get_data(timeout)
        if success:
            idx, reply = data
            if type(idx) is int:
                slot = self._slot_of_task.pop(idx, None)
                # A reply without a batch (error, end of an iterable) leaves its slot unused.
                if slot is not None and not isinstance(reply, ArenaBatch):
                    self._arena.release(slot)
        return success, data

    def _try_put_index(self) -> None:
        # torch's, with an arena slot attached to the task.
        max_tasks = self._prefetch_factor * self._num_workers
        if self._tasks_outstanding >= max_tasks:
            raise AssertionError("Number of outstanding tasks exceeded maximum allowed tasks")
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):  # find the next active worker, if any
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx]:
                if self._in_order:
                    break
                if self._workers_num_tasks[worker_queue_idx] < max_tasks // sum(self._workers_status):
                    break
        else:
            return
        slot = self._arena.acquire() if self._arena is not None else None
        if slot is not None:
            self._slot_of_task[self._send_idx] = slot
        self._index_queues[worker_queue_idx].put((self._send_idx, index, slot))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._workers_num_tasks[worker_queue_idx] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data, worker_idx):
        self._workers_num_tasks[worker_idx] -= 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            try:
                data.reraise()
            except OSError as e:  # the worker ran out of descriptors: say which limit, keep torch's exception
                if _out_of_descriptors(e):
                    e.add_note(_descriptor_hint(self._num_workers))
                raise
        stats = self._stats
        stats["batches"] += 1
        if data.slot is None:
            stats["shared_batches"] += 1
            batch = pickle.loads(data.data)
        else:
            stats["arena_batches"] += 1
            batch = self._arena.loads(data.slot, data.file_size, data.data)
        if self._pin_memory:
            # Copies into torch's caching host allocator: the slot's views die here, and the pinned copies'
            # reuse is torch's, fenced by an event on every stream that copies from them (arena.py).
            batch = _utils.pin_memory.pin_memory(batch, self._pin_memory_device)
        return batch

    def _mark_worker_as_unavailable(self, worker_id, shutdown=False) -> None:
        if not shutdown:
            return super()._mark_worker_as_unavailable(worker_id, shutdown)
        # Shutdown can run from __del__ at any allocation (the garbage collector), and torch's SIGCHLD handler
        # can raise at any bytecode, even right after put() took the queue's lock and before its `with` owns it.
        # A lock left held that way must not hang the shutdown: the queue's close-finaliser is cancelled, the stop
        # message is skipped, and the worker is terminated after the join timeout instead.
        q = self._index_queues[worker_id]
        lock = getattr(q, "_notempty", None)
        if lock is None or lock.acquire(timeout=1.0):
            if lock is not None:
                lock.release()
            q.put(None)
        else:
            # close() (and the interpreter's exit) would run the queue's finaliser, which takes the same lock.
            if getattr(q, "_close", None) is not None:
                q._close.cancel()
                q._close = None
            q._notempty = threading.Condition(threading.Lock())
        self._workers_status[worker_id] = False

    def _shutdown_workers(self) -> None:
        try:
            super()._shutdown_workers()
        finally:
            if getattr(self, "_shutdown", False):
                _LIVE_QUEUES.pop(id(self), None)
                arena = getattr(self, "_arena", None)
                if arena is not None:
                    arena.close()


class PlanIter(_BaseDataLoaderIter):
    """A native fast path's batches, behind torch's protocol. torch's own iterator base makes the sampler
    iterator, draws the epoch's seed from ``loader.generator`` (the same draws, in the same order, as torch's
    DataLoader: shuffles and every later draw match) and decides pinning, as for the generic path."""

    held_batches = ""  # the plan's (Plan.held_batches)

    def __init__(self, loader, plan):
        super().__init__(loader)
        record_pinning(self, loader)
        self._stats = loader._chute_stats
        self._batches = plan.batches(self._sampler_iter, base_seed=self._base_seed)

    def _next_data(self):
        data = next(self._batches)
        if self._pin_memory:
            data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)
        self._stats["batches"] += 1
        return data
