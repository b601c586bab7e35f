"""Iterators of chute.DataLoader.

* ``SingleProcessIter`` (num_workers=0): torch's in-process iterator, unchanged, plus chute's counters.
* ``MultiProcessIter``: torch's multi-process iterator's bookkeeping (task order, in_order=False, prefetch,
  persistent-worker resume, timeout, worker-death detection through SIGCHLD and liveness polls, shutdown) with
  chute's workers (worker.py) and transport: each task carries an arena slot (arena.py) that the worker collates
  into, and the batch comes back as zero-copy views of that slot.
* ``PlanIter``: a native fast path (plan.py chooses it) behind torch's seed and sampler protocol.

Every one is a ``torch.utils.data.dataloader._BaseDataLoaderIter``: torch's base decides pinning (from
``pin_memory`` and the current accelerator) for every path, and each records the decision for ``stats()``
(:func:`record_pinning`). Pinned batches are copies in torch's pinned blocks, made on a pin thread one batch
ahead by the worker and fast paths, and in line by the in-process iterator, as torch does (pinning.py).
Each reports its epoch to the DataLoader's resume tracker (state.py): when it starts (a loaded state resumes
there), each batch the consumer receives (with the worker's RNG states, generic path) and the epoch's end. A
batch taken ahead for the pin thread is fetched, not received: it counts once it is handed to the consumer.
"""

from __future__ import annotations

import errno
import itertools
import os
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
from chute.dataloader import pinning as _pinning
from chute.dataloader import state as _state
from chute.dataloader.worker import ArenaBatch, _fetch_map, _Where, worker_loop

# Each live iterator's queues, held from outside the iterator. When the garbage collector frees an iterator caught
# in a reference cycle (an exception's traceback, for one), the queues would otherwise be freed in the same pass
# and their finalizers close the feeder threads *before* the iterator's __del__ sends the workers their stop
# message: the workers never hear it, and torch's shutdown waits out a 5 s join per worker. With the queues held
# here until shutdown has run, a garbage-collected iterator stops its workers in milliseconds.
_LIVE_QUEUES: dict[int, tuple] = {}

# Slots beyond the tasks in flight (prefetch_factor * num_workers): the batch the user holds and the next one.
SPARE_SLOTS = 2


def record_pinning(it: _BaseDataLoaderIter, loader, where: str) -> None:
    """What torch's iterator base decided about pinning, for ``loader.stats()["pinning"]``."""
    loader._chute_pinning = _pinning.describe(it._pin_memory_device if it._pin_memory else None, where)


def pin_ahead(it: _BaseDataLoaderIter) -> _pinning.PinAhead | None:
    """The pin thread of an iterator that pins ahead (pinning.py), when torch's base decided to pin."""
    return _pinning.PinAhead(it._pin_memory_device) if it._pin_memory else None


def next_handed(it: _BaseDataLoaderIter):
    """The iterator's next batch, through its pin thread where it pins ahead, counted as the consumer's once it
    is handed over (a batch whose error is raised in its place counts too); the epoch's end goes to the tracker."""
    try:
        data = it._next_unpinned() if it._pinner is None else it._pinner.next(it._next_unpinned)
    except StopIteration:
        it._tracker.ended(it)
        raise
    except Exception:
        it._tracker.handed(it)  # raised in place of its batch: the consumer had it
        raise
    it._tracker.handed(it)
    it._stats["batches"] += 1
    return data


class SingleProcessIter(_SingleProcessDataLoaderIter):
    """torch's in-process iterator; an error from the dataset or collate_fn also gets a note naming the sample."""

    held_batches = "fresh tensors: torch's collate makes each batch; nothing is recycled"

    def __init__(self, loader):
        tracker = self._tracker = loader._chute_tracker
        token = tracker.before_iterator()
        super().__init__(loader)
        tracker.begin(self, token)
        self._chute_discard = tracker.start_epoch(self)
        record_pinning(self, loader, _pinning.IN_LINE)
        self._stats = loader._chute_stats

    def _next_data(self):
        try:
            if self._chute_discard:  # an iterable dataset's resumed epoch: what the consumer had, again
                count, self._chute_discard = self._chute_discard, 0
                with _state.replaying(self._tracker.current.rng):
                    drop_received(self._fetch, count)
            return self._fetch()
        except StopIteration:
            self._tracker.ended(self)
            raise

    def _fetch(self):
        index = self._next_index()  # may raise StopIteration
        if self._dataset_kind == _DatasetKind.Iterable:
            try:
                data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
            except StopIteration:
                raise
            except Exception:
                self._tracker.delivered(self)  # raised in place of the batch: the consumer had it
                raise
            self._tracker.delivered(self)
        else:
            self._tracker.delivered(self)  # the batch of this index list, or its error, is the consumer's
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


def drop_received(next_batch, count: int) -> None:
    """Makes ``count`` batches again and drops them: a resumed epoch's batches the consumer had received (or
    had an error raised for) after its state's snapshot. StopIteration goes through."""
    for _ in range(count):
        try:
            next_batch()
        except StopIteration:
            raise
        except Exception:  # raised to the consumer before the state was taken
            pass


def _descriptor_hint(num_workers: int, torch_sharing: bool = False) -> str:
    """What ran out and what to change. ``torch_sharing``: the failure was torch's per-tensor shared memory
    (a batch that did not fit the arena), where torch's 'file_system' sharing strategy needs no descriptor."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    hint = (
        f"chute.DataLoader: out of file descriptors. Its {num_workers} worker processes each hold pipes and "
        f"queues, and batches travel through shared memory; the per-process limit is {limit} open files "
        f"(hard limit {'unlimited' if hard == resource.RLIM_INFINITY else hard}). Raise it with `ulimit -n` "
        "(or resource.setrlimit(resource.RLIMIT_NOFILE, ...)), or lower num_workers or prefetch_factor."
    )
    if torch_sharing and torch.multiprocessing.get_sharing_strategy() == "file_descriptor":
        hint += (
            " This batch came through torch's shared memory (one descriptor per tensor), which "
            "torch.multiprocessing.set_sharing_strategy('file_system') at the start of the script avoids."
        )
    return hint


def _descriptor_error(e: Exception, num_workers: int, torch_sharing: bool = False):
    """The one error the user sees for running out of descriptors: chute.ResourceError naming the limit."""
    from chute.errors import ResourceError

    code = getattr(e, "errno", None) or errno.EMFILE
    return ResourceError(code, f"{os.strerror(code)}: {_descriptor_hint(num_workers, torch_sharing)}")


def start_workers(loader) -> MultiProcessIter:
    """MultiProcessIter(loader), with running out of descriptors while starting the workers raised as
    chute.ResourceError naming `ulimit -n`, instead of torch's bare EMFILE."""
    try:
        return MultiProcessIter(loader)
    except OSError as e:
        if not _arena.out_of_descriptors(e):
            raise
        raise _descriptor_error(e, loader.num_workers) from None


class MultiProcessIter(_MultiProcessingDataLoaderIter):
    held_batches = (
        "shared-memory arena: a batch views a reused slot, back to the arena when its tensors die; "
        "with every slot held, torch's per-tensor shared memory (freed with the batch)"
    )

    def __init__(self, loader):
        self._shutdown = True  # until every worker runs: torch's __del__ has nothing to stop
        tracker = self._tracker = loader._chute_tracker
        token = tracker.before_iterator()
        _BaseDataLoaderIter.__init__(self, loader)  # torch's seed draw, sampler iterator and pin_memory warnings
        # A resumed iterator: the epoch's base seed, and the RNG states each worker goes on from.
        self._chute_worker_rng = tracker.begin(self, token) or [None] * loader.num_workers
        record_pinning(self, loader, _pinning.AHEAD)
        self._pinner = pin_ahead(self)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        self._stats = loader._chute_stats
        if self._num_workers <= 0 or self._prefetch_factor <= 0:
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
        self._worker_result_queue = None
        self._worker_pids_set = False
        self._index_queues = []
        self._workers = []
        self._slot_of_task: dict[int, int] = {}
        try:
            self._start_workers(ctx)
        except BaseException:
            self._abandon_start()  # out of descriptors part-way, say: one error, and nothing left running
            raise
        self._shutdown = False
        self._data_queue = self._worker_result_queue
        _LIVE_QUEUES[id(self)] = (self._index_queues, self._worker_result_queue)

        _utils.signal_handling._set_worker_pids(id(self), tuple(w.pid for w in self._workers))
        _utils.signal_handling._set_SIGCHLD_handler()
        self._worker_pids_set = True
        self._reset(loader, first_iter=True)

    def _start_workers(self, ctx) -> None:
        """The arena, the queues and the worker processes (torch's start, with the arena's slots)."""
        if _arena.supported():
            self._arena = _arena.Arena(self._prefetch_factor * self._num_workers + SPARE_SLOTS)
        self._stats["arena_slots"] = self._arena.num_slots if self._arena else 0
        handles = self._arena.handles() if self._arena else []

        self._worker_result_queue = ctx.Queue()
        self._workers_done_event = ctx.Event()
        for i in range(self._num_workers):
            index_queue = ctx.Queue()
            index_queue.cancel_join_thread()
            self._index_queues.append(index_queue)
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
                    self._chute_worker_rng[i],
                ),
            )
            w.daemon = True
            if ctx.get_start_method() == "fork" and _arena.near_descriptor_limit(4):
                # CPython's fork start opens two pipes and leaks the first when the second fails: refuse first.
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            w.start()
            self._workers.append(w)

    def _abandon_start(self) -> None:
        """Undoes a start that failed part-way: the workers started so far (none has a task yet) are
        terminated and joined, the queues and the arena's files closed."""
        for w in self._workers:
            w.terminate()
        for w in self._workers:
            w.join(timeout=5.0)
            if w.is_alive():
                w.kill()
                w.join()
        for q in [*self._index_queues, self._worker_result_queue]:
            if q is not None:
                q.cancel_join_thread()
                q.close()
        if self._arena is not None:
            self._arena.close()

    # torch's _reset, releasing the slots of replies it throws away between epochs (persistent workers).
    def _reset(self, loader, first_iter=False) -> None:
        _BaseDataLoaderIter._reset(self, loader, first_iter)
        if getattr(self, "_pinner", None) is not None:
            self._pinner.reset()  # a batch taken ahead in the epoch left behind
        _state.Tracker.forget_fetched(self)  # ... which the consumer never had
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
                    worker, rng = return_data  # its RNG states after every task it made, dropped ones too
                    self._chute_worker_rng[worker] = rng
                else:
                    self._drop_reply(return_data)
            # Tasks a worker skipped after its iterable dataset ended never got a reply: their slots are free.
            for slot in self._slot_of_task.values():
                self._arena.release(slot)
            self._slot_of_task.clear()
        # The epoch, for the resume tracker; a resumed one starts at its batch offset, which goes to the worker
        # that made it in the uninterrupted run (task t to worker t mod num_workers).
        self._chute_discard = self._tracker.start_epoch(self, self._chute_worker_rng)
        for _ in range(self._chute_offset % self._num_workers):
            next(self._worker_queue_idx_cycle)
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _drop_reply(self, data) -> None:
        if isinstance(data, ArenaBatch) and data.slot is not None:
            self._arena.release(data.slot)

    def _next_data(self):
        if self._chute_discard:  # a resumed epoch: what the consumer had since the snapshot, again
            count, self._chute_discard = self._chute_discard, 0
            try:
                drop_received(self._next_handed, count)
            except StopIteration:
                self._tracker.ended(self)
                raise
        return next_handed(self)

    def _next_unpinned(self):
        return _MultiProcessingDataLoaderIter._next_data(self)

    def _next_handed(self):
        """The next batch, counted as the consumer's at once: a resumed epoch's batches made again and dropped."""
        try:
            data = self._next_unpinned()
        except StopIteration:
            raise
        except Exception:
            self._tracker.handed(self)
            raise
        self._tracker.handed(self)
        return data

    def _get_data(self):
        # torch's, without its pin-memory thread's branch: chute's pin thread takes batches from this thread.
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
        snapshot = self._tracker.wants_snapshot(self, self._chute_offset + self._send_idx)
        self._index_queues[worker_queue_idx].put((self._send_idx, index, slot, snapshot))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._workers_num_tasks[worker_queue_idx] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data, worker_idx):
        # The consumer receives this batch (or its error): the worker's RNG states after it come with it.
        rng = data.rng if isinstance(data, ArenaBatch) else getattr(data, "chute_rng", None)
        if rng is not None:
            self._chute_worker_rng[worker_idx] = rng
        self._tracker.fetched(self, worker_idx, rng)  # the consumer's once handed over (pin thread ahead)
        self._workers_num_tasks[worker_idx] -= 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            try:
                data.reraise()
            except Exception as e:  # the worker ran out of descriptors: say which limit, keep torch's exception
                if _arena.out_of_descriptors(e):
                    e.add_note(_descriptor_hint(self._num_workers))
                raise
        stats = self._stats
        try:
            if data.slot is None:
                stats["shared_batches"] += 1
                batch = pickle.loads(data.data)  # torch's shared tensors: a descriptor each, received here
            else:
                stats["arena_batches"] += 1
                batch = self._arena.loads(data.slot, data.file_size, data.data)
        except Exception as e:
            shared = data.slot is None
            if not (_arena.out_of_descriptors(e) or (shared and _arena.near_descriptor_limit())):
                raise
            raise _descriptor_error(e, self._num_workers, torch_sharing=shared) from None
        # With pin_memory, the pin thread copies the batch into torch's caching host allocator (pinning.py): the
        # slot's views die there, and the pinned copies' reuse is torch's (arena.py).
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
                if getattr(self, "_pinner", None) is not None:
                    self._pinner.close()
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
        tracker = self._tracker = loader._chute_tracker
        token = tracker.before_iterator()
        super().__init__(loader)
        tracker.begin(self, token)
        tracker.start_epoch(self)
        record_pinning(self, loader, _pinning.AHEAD)
        self._pinner = pin_ahead(self)
        self._stats = loader._chute_stats
        self._batches = plan.batches(self._sampler_iter, base_seed=self._base_seed, epoch=tracker.current.number)

    def _next_data(self):
        try:
            return next_handed(self)
        except StopIteration:
            self.close()
            raise

    def _next_unpinned(self):
        try:
            data = next(self._batches)
        except StopIteration:
            raise
        except Exception:
            self._tracker.fetched(self)  # its error goes to the consumer in its place
            raise
        self._tracker.fetched(self)
        return data

    def close(self) -> None:
        """Ends the pin thread (at the epoch's end, or when the iterator goes)."""
        if getattr(self, "_pinner", None) is not None:
            self._pinner.close()

    def __del__(self):
        self.close()
