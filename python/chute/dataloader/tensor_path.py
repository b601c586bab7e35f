"""The ``"tensor"`` fast path of ``chute.DataLoader``: rows of in-memory tensors, gathered natively.

The dataset is a ``torch.utils.data.TensorDataset`` (its ``__getitem__`` not overridden), or follows the
*columns protocol*: it has an attribute ``chute_columns``, a tuple or list of CPU tensors / numpy arrays
with one row per sample (then ``dataset[i]`` must be ``tuple(c[i] for c in chute_columns)``), or a single
tensor / array (then ``dataset[i]`` must be ``chute_columns[i]``). Each batch is gathered natively
(``chute._native.Gatherer``: memcpy of whole rows on a pool of ``chute-gather`` threads, without the GIL)
into fresh buffers, so a batch may be kept for as long as the caller likes.

The plan holds every column and its storage; before each batch it checks that the dataset still has those
columns, at the same address and size, and plans again (or, if they no longer qualify, fetches in-process)
when they changed: a column reallocated, replaced or ``resize_()``-d mid-epoch gives torch's batches, never
a read of freed memory. Gathering runs ahead of the consumer (2 to 8 batches, 64 MB) only over storage that
cannot be reallocated in place (numpy arrays, memmaps); over a resizable torch storage each batch is
gathered when asked for, as torch fetches it, because ``resize_()`` in the consumer's code frees the old
memory at once and no reference can keep it.

Columns must be C-contiguous, of a plain numeric or bool dtype, without autograd history; anything else
falls back, with the reason. Planning also checks the promise: the batch of the first and last samples must
equal ``default_collate`` of ``dataset[i]`` in type, dtype, shape, strides and bytes, or it falls back.
Datasets with ``.data`` / ``.targets`` arrays (MNIST, CIFAR) are not taken on trust: their ``__getitem__``
converts and transforms each sample, so only an explicit ``chute_columns`` opts in.

The native copy threads run only during an epoch: between epochs a gatherer is parked, so a process that
forks later (a generic DataLoader's workers) does not find chute threads running. A plan used in a process
forked from the one that made it starts a gatherer of its own there (the parent's is inert in the child).
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import os

import numpy as np
import torch
from torch.utils.data import TensorDataset, default_collate

from chute import _native
from chute.dataloader.base import Fallback, Plan, RaiseInPlace, in_process, same_objects

_log = logging.getLogger("chute.dataloader")

# dtypes whose collated batch is the rows' bytes back to back (torch.stack of contiguous rows).
_PLAIN_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}
# Batches gathered ahead: as many as fit in this (at least 2, at most 8). The gather is memory-bound, so
# going further ahead buys no throughput: it only covers a consumer whose own time per batch varies.
_PREFETCH_BYTES = 64 << 20


def plan_dataset(dataset) -> Plan | Fallback | None:
    """The ``"tensor"`` plan for ``dataset``, a Fallback when it is a tensor dataset whose columns cannot be
    gathered, None when it is no tensor dataset."""
    columns = _tensor_columns(dataset)
    if columns is None or isinstance(columns, Fallback):
        return columns
    return TensorPlan.create(dataset, *columns)


def _is_tensor_dataset(dataset) -> bool:
    return isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__


def _raw_columns(dataset) -> tuple:
    """What the tensor path reads: a TensorDataset's tensors, or the chute_columns object; () otherwise."""
    if _is_tensor_dataset(dataset):
        return tuple(dataset.tensors)
    return (dataset.chute_columns,) if hasattr(dataset, "chute_columns") else ()


def _tensor_columns(dataset):
    """(columns, as_tuple) for a TensorDataset or a chute_columns dataset; None for other datasets; a
    Fallback for such a dataset whose columns cannot be gathered."""
    if _is_tensor_dataset(dataset):
        raw, as_tuple = list(dataset.tensors), True
    elif hasattr(dataset, "chute_columns"):
        raw = dataset.chute_columns
        as_tuple = isinstance(raw, (tuple, list))
        raw = list(raw) if as_tuple else [raw]
    else:
        return None
    if not raw:
        return Fallback("the dataset has no columns")
    columns = []
    for i, c in enumerate(raw):
        t = _as_gatherable(c, f"column {i}")
        if isinstance(t, Fallback):
            return t
        columns.append(t)
    n = columns[0].shape[0]
    for i, c in enumerate(columns):
        if c.shape[0] != n:
            return Fallback(f"column {i} has {c.shape[0]} rows, column 0 has {n}")
    if len(dataset) != n:
        return Fallback(f"len(dataset) is {len(dataset)} but its columns have {n} rows")
    return columns, as_tuple


def _as_gatherable(c, what: str):
    """A CPU tensor sharing the column's memory whose rows are contiguous bytes, or a Fallback."""
    if isinstance(c, np.ndarray):
        if c.dtype.kind not in "biufc":
            return Fallback(f"{what} is a numpy array of dtype {c.dtype}: only numeric and bool arrays are gathered")
        if not c.dtype.isnative:
            return Fallback(f"{what} is a numpy array in non-native byte order ({c.dtype.str})")
        if not (c.flags.c_contiguous and c.flags.aligned):
            return Fallback(f"{what} is a non-contiguous numpy array (strides {c.strides}): call np.ascontiguousarray")
        if c.ndim == 0:
            return Fallback(f"{what} is a 0-d array: it has no rows")
        try:
            c = torch.from_numpy(c)  # shares the memory; numpy dtypes torch lacks fail here
        except (TypeError, ValueError) as e:
            return Fallback(f"{what}: numpy dtype {c.dtype} has no torch equivalent ({e})")
    if not isinstance(c, torch.Tensor):
        return Fallback(f"{what} is a {type(c).__name__}, not a tensor or numpy array")
    if c.layout != torch.strided or c.is_quantized or c.is_nested:
        return Fallback(f"{what} has layout {c.layout}: only dense tensors are gathered")
    if c.device.type != "cpu":
        return Fallback(f"{what} is on {c.device}: the gather copies host memory")
    if c.dtype not in _PLAIN_DTYPES:
        return Fallback(f"{what} has dtype {c.dtype}, which the native gather does not handle")
    if c.requires_grad:
        return Fallback(f"{what} requires grad: torch.stack would record autograd history")
    if c.is_conj() or c.is_neg():
        return Fallback(f"{what} has a lazy conj/neg bit: its bytes are not its values")
    if c.dim() == 0:
        return Fallback(f"{what} is a 0-d tensor: it has no rows")
    if not c.is_contiguous():
        return Fallback(
            f"{what} is not contiguous (shape {tuple(c.shape)}, strides {c.stride()}): call .contiguous() on it"
        )
    return c


def _same(a, b) -> bool:
    """Same container types, tensor dtypes, shapes, strides and bytes (NaN-safe)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and a.stride() == b.stride()
            and torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))
            if a.numel()
            else a.dtype == b.dtype and a.shape == b.shape
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return False


class TensorPlan(Plan):
    kind = "tensor"
    held_batches = (
        "gather buffers: each batch is its own buffers, taken from the Gatherer's BufferPool and "
        "back to it (up to 1 GiB kept free for reuse) when the batch dies; never reused while held, so "
        "keeping batches costs only their own memory"
    )

    @classmethod
    def create(cls, dataset, columns: list[torch.Tensor], as_tuple: bool) -> Plan | Fallback:
        self = cls(dataset, columns, as_tuple)
        n = columns[0].shape[0]
        if n:
            probe = [0, n - 1]
            try:
                expected = default_collate([dataset[i] for i in probe])
                got = next(self._batches([probe], None, 0))
            except Exception as e:  # a dataset that breaks its own promise: let the generic path report it
                self.close()
                return Fallback(f"probing samples {probe} failed ({type(e).__name__}: {e})")
            if not _same(expected, got):
                self.close()
                return Fallback(
                    f"the gathered batch of samples {probe} differs from default_collate of dataset[i] "
                    "(its __getitem__ is not plain row indexing of its columns)"
                )
        self._gatherer.park()  # no thread until the first epoch
        return self

    def __init__(self, dataset, columns: list[torch.Tensor], as_tuple: bool):
        self._dataset = dataset
        self._columns = columns  # kept alive (and so their memory) for as long as the gatherer reads them
        self._as_tuple = as_tuple
        self._row_shapes = [tuple(c.shape[1:]) for c in columns]
        self._row_bytes = [math.prod(shape) * c.element_size() for c, shape in zip(columns, self._row_shapes)]
        # The storages too: a column given new storage (set_, .data =) leaves the old one to this plan.
        self._storages = [c.untyped_storage() for c in columns]
        # Gathering ahead of the consumer only where the memory cannot be reallocated under it (see above).
        self._ahead = not any(st.resizable() for st in self._storages)
        self._spec = [(c.data_ptr(), rb, c.shape[0]) for c, rb in zip(columns, self._row_bytes)]
        self._pid = os.getpid()
        self._gatherer = _native.Gatherer(self._spec)
        self._made_from = self._fingerprint()

    def _fingerprint(self) -> tuple:
        return (
            _raw_columns(self._dataset)
            + tuple(c.data_ptr() for c in self._columns)
            + tuple(c.shape[0] for c in self._columns)
            + tuple(st.nbytes() for st in self._storages)
        )

    def _moved(self) -> bool:
        """Whether the dataset's columns changed since planning: other objects, another address, another size."""
        return not same_objects(self._fingerprint(), self._made_from)

    def _replan(self) -> Plan | Fallback:
        columns = _tensor_columns(self._dataset)
        if columns is None:
            return Fallback("it is no longer a tensor dataset")
        return columns if isinstance(columns, Fallback) else TensorPlan.create(self._dataset, *columns)

    def _closed(self) -> bool:
        return self._gatherer is None

    def _batches(self, index_batches, base_seed, epoch):
        if self._pid != os.getpid():  # a forked child: the parent's gatherer is inert here
            self._pid, self._gatherer = os.getpid(), _native.Gatherer(self._spec)
        gatherer = self._gatherer
        pending: collections.deque = collections.deque()
        source = iter(index_batches)
        exhausted = False
        depth = 1  # until the first batch says how large batches are
        try:
            while True:
                if self._moved():
                    # Changed mid-epoch (the consumer's code ran since the last batch): plan again for the
                    # rest of it, these batches gathered ahead included. (Nothing is in flight over a
                    # resizable storage between batches; other storage is held, so still readable.)
                    redo = []
                    while pending:
                        ticket, _, indices = pending.popleft()
                        redo.append(indices)
                        try:
                            gatherer.wait(ticket)
                        except Exception:  # its error comes again, in its turn, from the new plan
                            pass
                    yield from self._rest_replanned(itertools.chain(redo, source), base_seed, epoch)
                    return
                while not exhausted and len(pending) < depth:
                    try:
                        indices = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    idx = np.asarray(indices)
                    if idx.size and idx.dtype.kind not in "iu":
                        raise TypeError(f"the batch sampler yielded non-integer indices: {list(indices)[:4]}")
                    idx = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
                    pending.append((gatherer.submit(idx), len(idx), indices))
                    if len(idx) and depth == 1 and self._ahead:
                        depth = max(2, min(8, _PREFETCH_BYTES // max(1, len(idx) * sum(self._row_bytes))))
                if not pending:
                    return
                ticket, n, _ = pending[0]
                try:
                    buffers = gatherer.wait(ticket)  # on Ctrl-C the job stays pending, drained below
                except IndexError as e:  # a bad index fails its own batch; the epoch goes on, as in torch
                    pending.popleft()
                    yield RaiseInPlace(e)
                    continue
                pending.popleft()
                yield self._assemble(buffers, n)
                del buffers
        finally:
            # The gatherer reads the columns until each queued batch is done: drain them before the
            # generator (and maybe the plan and its columns) goes.
            for ticket, _, _ in pending:
                try:
                    gatherer.wait(ticket)
                except Exception:  # an error in a batch nobody will see, or one already reported
                    pass
            gatherer.park()  # no native thread between epochs

    def _rest_replanned(self, source, base_seed, epoch):
        new = self._replan()
        if not isinstance(new, Plan):
            _log.warning(
                "chute: the dataset's columns changed during the epoch and no longer qualify for the "
                "fast path (%s); the rest of the epoch runs torch's fetch and collate in-process",
                new,
            )
            yield from in_process(self._dataset, source)
            return
        self.close()
        self.__dict__.update(new.__dict__)  # take over its native engine
        new.__dict__.clear()
        yield from self._batches(source, base_seed, epoch)

    def _assemble(self, buffers, n: int):
        out = [b.view(c.dtype).view((n, *shape)) for b, c, shape in zip(buffers, self._columns, self._row_shapes)]
        return out if self._as_tuple else out[0]

    def close(self) -> None:
        g, self._gatherer = getattr(self, "_gatherer", None), None
        if g is not None:
            g.close()
