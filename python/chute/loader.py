"""chute.Loader: batches from a source, decoded and transformed by native threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence

import torch

from chute import _native
from chute import delivery as _delivery
from chute.errors import Quarantine, SampleError
from chute.packed import source_from_path
from chute.stats import LoaderStats

_DTYPES = {torch.uint8: "uint8", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


_STATE_VERSION = 1


def _resolve_distributed(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """rank and world_size: as given, else from an initialised torch.distributed, else from torchrun's
    environment (RANK, WORLD_SIZE), else a single process."""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ValueError("give both rank and world_size, or neither")
    else:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        else:
            rank, world_size = 0, 1
    if world_size <= 0:
        raise ValueError(f"world_size must be positive, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank} with world_size={world_size}")
    return rank, world_size


def _native_transforms(transforms) -> list:
    items = getattr(transforms, "transforms", transforms)  # a Compose-like object, or a list
    if not isinstance(items, Sequence):
        raise TypeError(f"transforms must be a list of chute transforms, got {type(transforms).__name__}")
    out = []
    for t in items:
        if not hasattr(t, "_to_native"):
            raise TypeError(f"{t!r} is not a chute transform (chute.RandomResizedCrop, chute.Resize, ...)")
        out.append(t._to_native())
    return out


class Loader:
    """Iterates over ``(images, labels)`` batches of a source.

    ``images`` is a ``uint8``, ``float32``, ``float16`` or ``bfloat16`` tensor of shape ``(N, 3, H, W)`` (channels-last strides with
    ``memory_format=torch.channels_last``) and ``labels`` an ``int64`` tensor of shape ``(N,)``. Both share
    memory with one of chute's reusable batch buffers, which returns to the pool when both tensors are
    freed: keep ``.clone()`` of what you store.

    Float output is scaled to [0, 1] like ``ToTensor``, then normalised if ``Normalize`` is given, in
    float32, and rounded to float16/bfloat16 as ``tensor.to(dtype)`` would.

    Each ``iter(loader)`` runs one epoch. Epochs count up from 0 by themselves; ``set_epoch(e)`` chooses
    the next one (as with ``DistributedSampler``). Shuffling and augmentation are keyed by
    ``(seed, epoch, sample index)``, so a seed gives the same batches whatever ``num_threads``.
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly.

    Distributed: ``rank`` and ``world_size`` default to ``torch.distributed``'s when it is initialised, else
    to torchrun's ``RANK``/``WORLD_SIZE``. Rank ``r`` takes positions ``r, r + W, ...`` of each epoch's
    order. With ``even_split=True`` (training) every rank gets ``N // W`` samples, so all ranks run the
    same number of steps; the ``N % W`` left over (other samples each shuffled epoch) are not visited,
    where ``DistributedSampler`` would repeat samples instead. ``even_split=False`` (exact evaluation)
    visits every sample exactly once; ranks then differ by at most one sample (and so at most one batch):
    gather per-rank results with ``torch.distributed.all_gather_object``, or sum per-rank counts and totals
    with ``all_reduce``, rather than with collectives that expect equal shapes.
    ``drop_last`` applies per rank, to its last partial batch.

    Images larger than ``max_pixels`` are errors (a decompression-bomb guard). EXIF orientation is ignored,
    as torchvision does, unless ``apply_exif_orientation=True`` (then JPEGs are turned upright like
    ``PIL.ImageOps.exif_transpose``).

    ``scaled_decode=True`` lets JPEGs whose window shrinks at least 2x decode at 1/2, 1/4 or 1/8 scale
    (libjpeg's scaled IDCT): much faster on large photos, with pixels close to, not equal to, PIL's.

    Parallelism tunes itself by default: ``num_threads='auto'`` starts ``max_threads`` threads (default:
    every core this process may use; lower it to leave cores to the training process) and keeps as many of
    them working as the consumer's demand needs, measured from its own time between batches and the
    workers' time per sample. ``prefetch='auto'`` starts with enough batches to keep every thread busy and
    grows while workers idle and the consumer waits, as long as ``prefetch + 2`` batch buffers fit in
    ``max_memory`` bytes. Integers fix them. :meth:`stats` says where the time goes and what limits the
    loader.

    ``on_error='raise'`` raises :class:`chute.SampleError` (index, path, reason) in place of the batch holding a
    bad sample, when it is reached; as with torch's DataLoader, calling ``next()`` again goes on with the
    following batch (that batch's other samples are not delivered). ``'skip'`` leaves the sample out, fills the batch from the next samples, and
    records it in :meth:`errors`. ``quarantine="bad.jsonl"`` also appends each bad sample, once, to that
    file as a JSON line (index, path, reason, epoch) as soon as the consumer's next batch reports it.

    GPU delivery: ``device='cuda'`` (or ``'cuda:N'``) yields batches already on that GPU. Samples are
    decoded into pinned buffers, copied as uint8 on a stream of chute's own while the model runs, and
    the current stream waits for each copy without blocking the host; a float ``dtype`` (and
    ``Normalize``) is computed on the GPU. ``device_prefetch`` batches are copied ahead, in at most
    ``max_device_memory`` bytes of chute's own device buffers; like host batches, a device batch's
    buffer is reused once its tensors are freed: ``.clone()`` what you keep. Worker threads are pinned
    to the GPU's NUMA node when sysfs tells it (``max_threads`` then defaults to that node's CPUs). ``pin_memory`` (for ``device='cpu'``) has torch's
    meaning, pinned batches for your own ``.to('cuda', non_blocking=True)``; ``None`` turns it on when
    a CUDA GPU is present. ``device='sim'`` is for chute's own tests (a simulated GPU in host memory).
    """

    def __init__(self, source, batch_size: int = 1, *, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, transforms=(), dtype: torch.dtype = torch.uint8,
                 memory_format: torch.memory_format = torch.contiguous_format, num_threads: int | str = "auto",
                 prefetch: int | str = "auto", max_threads: int | None = None, max_memory: int = 2 << 30,
                 on_error: str = "raise", max_pixels: int = 200_000_000,
                 apply_exif_orientation: bool = False, scaled_decode: bool = False, rank: int | None = None,
                 world_size: int | None = None, even_split: bool = True,
                 quarantine: str | os.PathLike | None = None, device="cpu", pin_memory: bool | None = None,
                 device_prefetch: int = 2, max_device_memory: int = 4 << 30):
        if isinstance(source, (str, os.PathLike)):
            source = source_from_path(source)  # an ImageFolder tree, packed shards or tar shards
        native_source = getattr(source, "_native", None)
        if not isinstance(native_source, _native.Source):
            raise TypeError(f"source must be a chute source (chute.ImageFolder, ...), got {type(source).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype}")
        if memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError("memory_format must be torch.contiguous_format or torch.channels_last")
        if num_threads != "auto" and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                      or num_threads <= 0):
            raise ValueError(f"num_threads must be a positive int or 'auto', got {num_threads!r}")
        if prefetch != "auto" and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch <= 0):
            raise ValueError(f"prefetch must be a positive int (batches) or 'auto', got {prefetch!r}")
        if max_threads is not None and (isinstance(max_threads, bool) or not isinstance(max_threads, int)
                                        or max_threads <= 0):
            raise ValueError(f"max_threads must be a positive int or None (every core), got {max_threads!r}")
        if isinstance(num_threads, int) and max_threads is not None and num_threads > max_threads:
            raise ValueError(f"num_threads={num_threads} exceeds max_threads={max_threads}")
        if isinstance(max_memory, bool) or not isinstance(max_memory, int) or max_memory <= 0:
            raise ValueError(f"max_memory must be a positive int (bytes), got {max_memory!r}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if not isinstance(max_pixels, int) or max_pixels <= 0:
            raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
        if not 0 <= seed < 2**64:
            raise ValueError("seed must fit in 64 bits")
        device_kind, device_index = _delivery.parse_device(device)
        if isinstance(device_prefetch, bool) or not isinstance(device_prefetch, int) or device_prefetch <= 0:
            raise ValueError(f"device_prefetch must be a positive int, got {device_prefetch!r}")
        if isinstance(max_device_memory, bool) or not isinstance(max_device_memory, int) or max_device_memory <= 0:
            raise ValueError(f"max_device_memory must be a positive int (bytes), got {max_device_memory!r}")
        self.rank, self.world_size = _resolve_distributed(rank, world_size)
        self.source = source
        self.batch_size = batch_size
        self.dtype = dtype
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.even_split = bool(even_split)
        self._epoch = 0  # the epoch the next iteration runs
        self._running: int | None = None  # the epoch of the iteration in progress
        self._resume_position = 0  # where the next iteration starts in its epoch (load_state_dict)
        self._iteration = 0
        self._pid = os.getpid()  # in a forked child the native loader is inert (its threads are not there)
        self._close_lock = threading.Lock()
        self._closed = False
        self._quarantine = Quarantine(quarantine) if quarantine is not None else None
        self._errors_seen = 0  # errors() already written to the quarantine file
        # GPU delivery (chute/delivery.py): uint8 crosses PCIe, Normalize and the dtype happen on the device.
        host_dtype, normalize, native_device, affinity = dtype, None, None, None
        if device_kind != "cpu":
            transforms, normalize = _delivery.split_normalize(transforms)
            host_dtype = torch.uint8
            native_device = _delivery.open_device(device_kind, device_index, int(seed))
            if device_kind == "cuda":
                affinity = _native.cuda_local_cpus(device_index) or None
                if affinity and max_threads is None and not (isinstance(num_threads, int)
                                                              and num_threads > len(affinity)):
                    max_threads = len(affinity)  # a thread per CPU of the GPU's node
        elif pin_memory or pin_memory is None:
            available, _, why = _delivery.cuda_availability()
            if pin_memory and not available:
                raise ValueError(f"pin_memory=True needs libcudart / a CUDA GPU: {why}")
            if available:  # the current device's context, not device 0's on every rank
                native_device = _native.Device.cuda(torch.cuda.current_device() if torch.cuda.is_available() else 0)
        self.device = "sim" if device_kind == "sim" else torch.device(device_kind, device_index) \
            if device_kind == "cuda" else torch.device("cpu")
        self._native = _native.Loader(
            native_source, _native_transforms(transforms), batch_size, bool(shuffle), int(seed), bool(drop_last),
            0 if num_threads == "auto" else num_threads, max_threads or 0, 0 if prefetch == "auto" else prefetch,
            max_memory, _DTYPES[host_dtype], memory_format == torch.channels_last, on_error, max_pixels,
            bool(apply_exif_orientation), bool(scaled_decode), self.rank, self.world_size, self.even_split,
            pinned_by=native_device, extra_buffers=device_prefetch + 1 if device_kind != "cpu" else 0,
            cpu_affinity=affinity)
        self.pin_memory = self._native.pinned
        # What iteration drives: the host loader, or the DeviceLoader wrapping it.
        self._driver = self._native
        if device_kind != "cpu":
            self._driver = _delivery.Delivery(self._native, native_device, device_kind, device_index, dtype,
                                              normalize, device_prefetch, max_device_memory)

    @property
    def num_threads(self) -> int:
        """Threads in the pool: ``num_threads`` when given, else ``max_threads`` (auto mode activates
        between 1 and all of them; see :attr:`active_threads`)."""
        return self._native.num_threads

    @property
    def active_threads(self) -> int:
        """Threads allowed to work now (auto mode changes it as the consumer's demand changes)."""
        return self._native.active_threads

    @property
    def prefetch(self) -> int:
        """Batches prepared ahead of the consumer now (auto mode grows it within ``max_memory``)."""
        return self._native.prefetch

    def stats(self) -> LoaderStats:
        """Where the time went since the loader was created or :meth:`reset_stats`, with a verdict:
        input-bound (and which stage limits) or consumer-bound. A dict; ``print()`` it for a summary."""
        return LoaderStats(self._native.stats())

    def reset_stats(self) -> None:
        """Starts the statistics afresh (e.g. after a warm-up epoch)."""
        self._native.reset_stats()

    def __len__(self) -> int:
        """This rank's batches per epoch (with ``on_error='skip'``, an epoch with bad samples may yield fewer)."""
        return len(self._native)

    @property
    def num_samples(self) -> int:
        """Samples this rank visits per epoch."""
        return self._native.epoch_size

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (from its start); it keys shuffling and augmentation."""
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        self._epoch, self._resume_position = int(epoch), 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:
            raise RuntimeError("the loader is closed: make a new chute.Loader to iterate again")
        self._iteration += 1
        epoch, start = self._epoch, self._resume_position
        self._epoch, self._resume_position, self._running = epoch + 1, 0, epoch
        self._driver.start_epoch(epoch, start)
        return _Epoch(self, self._iteration)

    def _next_batch(self, iteration: int):
        """The epoch's next batch, or None at its end; raises SampleError in place of a bad sample's batch
        (the epoch goes on), RuntimeError once the loader is closed or the iterator superseded."""
        if iteration != self._iteration:
            raise RuntimeError("this iterator was superseded: a newer iter(loader) restarted the loader")
        native = self._native
        try:
            batch = self._driver.next()
        except _native.SampleError:
            # No local names the error: the traceback holds this frame, and a frame that held its own
            # exception would be a reference cycle keeping a batch buffer until the collector runs.
            raise self._sample_error(native) from None
        except RuntimeError as e:
            if self._closed:  # close() from another thread while this one waited: never a quiet epoch end
                raise RuntimeError("the loader was closed during iteration") from e
            raise
        if self._quarantine is not None:
            for e in native.errors(self._errors_seen):
                self._errors_seen += 1
                self._quarantine.add(SampleError(*e))
        if batch is None:
            self._running = None
        return batch

    def _sample_error(self, native) -> SampleError:
        error = SampleError(*native.failed_sample())
        if self._quarantine is not None:
            self._quarantine.add(error)
        return error

    def state_dict(self) -> dict:
        """Where the loader is, as a small JSON-serialisable dict: loading it into a loader built the same
        way resumes with exactly the batches an uninterrupted run would yield next, whatever the thread
        count and however many batches were prefetched when it was taken. Positions count the samples this
        rank's consumer has received, not those prepared ahead."""
        if self._running is not None and self._native is not None:
            epoch, position = self._running, self._driver.position()
            if position >= self.num_samples:
                epoch, position = epoch + 1, 0
        else:
            epoch, position = self._epoch, self._resume_position
        return {"format_version": _STATE_VERSION, "epoch": epoch, "position": position, "seed": self.seed,
                "shuffle": self.shuffle, "drop_last": self.drop_last, "batch_size": self.batch_size,
                "dataset_size": len(self.source), "rank": self.rank, "world_size": self.world_size,
                "even_split": self.even_split}

    def load_state_dict(self, state: dict) -> None:
        """Resumes from :meth:`state_dict`: the next iteration continues that epoch at that position."""
        version = state.get("format_version")
        if version != _STATE_VERSION:
            raise ValueError(f"unsupported loader state format_version {version!r} (this chute reads {_STATE_VERSION})")
        if state["dataset_size"] != len(self.source):
            raise ValueError(f"the state is for a dataset of {state['dataset_size']} samples, this source has "
                             f"{len(self.source)}")
        if state["world_size"] != self.world_size:
            raise ValueError(f"the state was taken with world_size={state['world_size']}, this loader has "
                             f"world_size={self.world_size}; resuming on another number of ranks is not supported")
        for key in ("seed", "shuffle", "drop_last", "batch_size", "even_split"):
            if state[key] != getattr(self, key):
                raise ValueError(f"the state was taken with {key}={state[key]!r}, this loader has "
                                 f"{key}={getattr(self, key)!r}: build the Loader with the same {key}")
        if not 0 <= state["position"] <= self.num_samples:
            raise ValueError(f"position {state['position']} is outside this rank's epoch of {self.num_samples}")
        self._iteration += 1  # an iteration in progress is superseded
        self._running = None
        self._epoch, self._resume_position = int(state["epoch"]), int(state["position"])

    @property
    def decode_warnings(self) -> int:
        """Decoder warnings that left their image intact (libjpeg's "extraneous bytes before marker" and
        the like), counted over the loader's life. Warnings that mean lost data are errors instead."""
        return self._native.decode_warnings

    def errors(self) -> list[SampleError]:
        """Samples skipped so far (``on_error='skip'``), oldest first."""
        return [SampleError(*e) for e in self._native.errors()] if self._native is not None else []

    def close(self) -> None:
        """Stops the threads. Batches already handed out stay valid. Idempotent and thread-safe: each call
        returns once the threads are gone. An iteration in progress (in another thread) then raises
        RuntimeError; a closed loader cannot be iterated again."""
        driver = getattr(self, "_driver", None)
        if driver is None:  # __init__ failed before the native loader existed
            return
        if os.getpid() != self._pid:
            # A forked child: the threads and locks are the parent's. The native loader is already inert
            # here and close() on it returns at once; this lock may have been held by a parent thread.
            self._closed = True
            return
        with self._close_lock:
            self._closed = True
            driver.close()  # a DeviceLoader waits for its copies in flight, then closes the loader

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown may have torn down what close() uses: the native side
            pass  # closes itself when the object goes

    def __repr__(self) -> str:
        return (f"chute.Loader({self.source!r}, batch_size={self.batch_size}, dtype={self.dtype}, "
                f"num_threads={self.num_threads}, device={str(self.device)!r})")


class _Epoch(Iterator):
    """One epoch of a :class:`Loader` (``iter(loader)``). Unlike a generator, it survives an exception:
    after a :class:`SampleError`, ``next()`` goes on with the batch after the failed one, as torch's
    DataLoader iterator does."""

    def __init__(self, loader: Loader, iteration: int):
        self._loader = loader
        self._iteration = iteration
        self._done = False

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._done:
            raise StopIteration
        batch = self._loader._next_batch(self._iteration)
        if batch is None:
            self._done = True
            raise StopIteration
        return batch
