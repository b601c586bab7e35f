"""chute.Loader: batches from a source, decoded and transformed by native threads."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator

import torch

from chute import _native, _options, _resume_state, _validate
from chute import delivery as _delivery
from chute._options import DEFAULTS
from chute.errors import Quarantine, SampleError
from chute.resolve import source_from_path
from chute.stats import LoaderStats, remote_evidence, remote_limit


class Loader:
    """Iterates over ``(images, labels)`` batches of a source.

    ``images`` is a ``uint8``, ``float32``, ``float16`` or ``bfloat16`` tensor of shape ``(N, 3, H, W)`` (channels-last strides with
    ``memory_format=torch.channels_last``) and ``labels`` an ``int64`` tensor of shape ``(N,)``. ``images``
    shares memory with one of chute's reusable batch buffers, which returns to the pool when the tensor is
    freed: keep ``.clone()`` of the images you store. ``labels`` has its own small allocation, so keeping
    labels (``targets.append(labels)``) holds no image memory. A consumer that keeps image batches alive
    makes the ring of buffers grow (it says so once), up to ``max_ring_bytes``; beyond that the next
    batch raises an error naming the held buffers.

    Float output is scaled to [0, 1] like ``ToTensor``, then normalised if ``Normalize`` is given, in
    float32, and rounded to float16/bfloat16 as ``tensor.to(dtype)`` would.

    Each ``iter(loader)`` runs one epoch. Epochs count up from 0 by themselves; ``set_epoch(e)`` chooses
    the next one (as with ``DistributedSampler``). Shuffling and augmentation are keyed by
    ``(seed, epoch, sample index)``, so a seed gives the same batches whatever ``num_threads``.
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly.

    Order: ``order='sample'`` (the default) visits a random permutation of every sample (``shuffle=True``),
    keyed by ``(seed, epoch)``. ``order='shards'``, for sources stored as shards (``chute pack`` shards,
    tar files), reads shards rather than scattered samples, as remote storage needs: each epoch shuffles
    the shard order, cuts it into windows of ``shard_window`` shards (default 8) and shuffles the samples
    of each window together, so a batch's samples come from at most ``shard_window`` shards (two windows
    at a window's end) and a rank holds only those shards open. Without ``shuffle`` both orders are the
    source's order. Either order is exact: every sample once per epoch across ranks, the same batches for
    the same ``(seed, epoch, world_size)``, and an exact resume. docs/ORDER.md states their statistical
    properties. ``order='shards'`` on a source without shards (an ImageFolder) is a ``ValueError``.

    Distributed: ``rank`` and ``world_size`` default to ``torch.distributed``'s when it is initialised, else
    to torchrun's ``RANK``/``WORLD_SIZE``. With ``order='sample'``, rank ``r`` takes positions
    ``r, r + W, ...`` of each epoch's order; with ``order='shards'``, the ``r``-th contiguous block of it,
    so that each rank reads about ``1/W`` of the shards. With ``even_split=True`` (training) every rank gets ``N // W`` samples, so all ranks run the
    same number of steps; the ``N % W`` left over (other samples each shuffled epoch) are not visited,
    where ``DistributedSampler`` would repeat samples instead. ``even_split=False`` (exact evaluation)
    visits every sample exactly once; ranks then differ by at most one sample (and so at most one batch):
    gather per-rank results with ``torch.distributed.all_gather_object``, or sum per-rank counts and totals
    with ``all_reduce``, rather than with collectives that expect equal shapes. A ``world_size`` larger
    than the dataset with ``even_split=True`` (every rank would get 0 samples) is a ``ValueError``.
    ``drop_last`` applies per rank, to its last partial batch (a warning when that leaves no batch at all).

    Images larger than ``max_pixels`` are errors (a decompression-bomb guard), and so are files larger than
    ``max_file_bytes`` (default 1 GiB), which are never read. EXIF orientation is ignored,
    as torchvision does, unless ``apply_exif_orientation=True`` (then JPEGs are turned upright like
    ``PIL.ImageOps.exif_transpose``). ``accept_truncated=True`` decodes a JPEG whose data ends early with the
    missing part gray, as PIL does under ``ImageFile.LOAD_TRUNCATED_IMAGES`` (by default it is an error).

    ``validate='window'`` (the default) checks what each sample's decode reads: a JPEG's header, end
    marker and the rows down to the crop's last one; a PNG's whole chunk list and CRCs. Damage in the
    compressed pixels below the crop is then found only in epochs whose random crop reaches it.
    ``validate='full'`` decodes every pixel of every image, so a damaged file fails in every epoch, at the
    cost of a whole-image decode per sample (crop-on-decode's savings are lost; the pixels are the same).
    ``chute pack --validate full`` and ``chute inspect --verify`` run that check once, ahead of training.

    ``decode='exact'`` (the default) gives PIL's pixels. ``decode='reduced'`` lets a JPEG decode at 1/2, 1/4
    or 1/8 scale (libjpeg's scaled IDCT) as long as the resize still shrinks the reduced window by at least
    ``reducing_gap`` (default 3.0, at least 1.0) on both axes: Pillow's ``reducing_gap`` of
    ``Image.resize``/``thumbnail``. Faster on large originals (an eval pipeline, a first pass of
    progressive resizing), with pixels close to, not equal to, the exact ones; docs/DECODE.md measures both.

    Parallelism tunes itself by default: ``num_threads='auto'`` starts ``max_threads`` threads (default:
    every core this process may use; lower it to leave cores to the training process) and keeps as many of
    them working as the consumer's demand needs, measured from its own time between batches and the
    workers' time per sample. ``prefetch='auto'`` starts with enough batches to keep every thread busy and
    grows while workers idle and the consumer waits, as long as ``prefetch + 2`` batch buffers (plus, with
    ``device=``, those whose copies are in flight) fit in ``max_memory`` bytes. Integers fix them; an
    integer ``prefetch`` whose buffers do not fit in ``max_memory`` is lowered to fit, with the engine's
    warning, and a ``max_memory`` that does not hold even ``prefetch=1``'s buffers is a ``ValueError``
    naming both sizes, whatever the prefetch. Decoding a large image (more than 16 MiB of scratch,
    e.g. a 14000x14000 PNG) waits until its memory fits in ``max_memory`` beside the batch buffers and the
    other large decodes (one such image always runs), so such images do not all decode at once: the
    loader's memory stays within ``max_memory``, plus up to 16 MiB of scratch per thread, plus one image
    that alone does not fit. :meth:`stats` says where the time goes and what limits the
    loader.

    Arguments are checked when the loader is built: a wrong type is a ``TypeError``, a number outside
    what the engine takes (e.g. ``batch_size`` in [1, 2**63 - 1], ``seed`` in [0, 2**64 - 1]) a
    ``ValueError``, each naming the argument and its range; so are non-integer ``RANK``/``WORLD_SIZE``.

    ``on_error='raise'`` raises :class:`chute.SampleError` (index, path, reason) in place of the batch holding
    a bad sample, when it is reached; as with torch's DataLoader, calling ``next()`` again goes on with the
    following batch (that batch's other samples are not delivered). ``'skip'`` leaves the sample out, fills
    the batch from the next samples, and records it in :meth:`errors`. Failures of the machine rather than
    the sample (out of file descriptors or memory, EIO, a stale network mount) are retried with backoff,
    then raise :class:`chute.ResourceError` naming the limit (``ulimit -n``, ...) in place of their batch
    under either policy; they are never skipped or quarantined. ``quarantine="bad.jsonl"`` also appends each
    bad sample, once, to that file as a JSON line (index, path, reason, epoch) as soon as the consumer's
    next batch reports it; the file is opened (created) when the loader is built, so an unwritable path
    fails there.

    GPU delivery: ``device='cuda'`` (or ``'cuda:N'``) yields batches already on that GPU. Samples are
    decoded into pinned buffers, copied as uint8 on a stream of chute's own while the model runs, and
    the current stream waits for each copy without blocking the host; a float ``dtype`` (and
    ``Normalize``) is computed on the GPU. ``device_prefetch`` batches are copied ahead, in at most
    ``max_device_memory`` bytes of chute's own device buffers; like host batches, a device batch's
    buffer is reused once its tensors are freed: ``.clone()`` what you keep. Worker threads are pinned
    to the GPU's NUMA node when sysfs tells it (``max_threads`` then defaults to that node's CPUs). ``pin_memory`` (for ``device='cpu'``) has torch's
    meaning, pinned batches for your own ``.to('cuda', non_blocking=True)``; ``None`` turns it on when
    a CUDA GPU is present, and ``True`` without one warns, as torch's DataLoader does, and runs unpinned
    (``device='cuda'`` without one stays an error). Pinned batches live in torch's pinned memory, so, as
    with torch's DataLoader, the CPU batch may be dropped right after a non_blocking copy on any stream.
    ``device='sim'`` is for chute's own tests (a simulated GPU in host memory).
    """

    # The engine's keywords and their defaults are chute._options' (read from the C++ structs), as in every door.
    def __init__(
        self,
        source,
        batch_size: int = DEFAULTS.batch_size,
        *,
        shuffle: bool = DEFAULTS.shuffle,
        seed: int = DEFAULTS.seed,
        drop_last: bool = DEFAULTS.drop_last,
        transforms=(),
        dtype: torch.dtype = DEFAULTS.dtype,
        memory_format: torch.memory_format = DEFAULTS.memory_format,
        num_threads: int | str = DEFAULTS.num_threads,
        prefetch: int | str = DEFAULTS.prefetch,
        max_threads: int | None = DEFAULTS.max_threads,
        max_memory: int = DEFAULTS.max_memory,
        on_error: str = DEFAULTS.on_error,
        max_pixels: int = DEFAULTS.max_pixels,
        apply_exif_orientation: bool = DEFAULTS.apply_exif_orientation,
        decode: str = DEFAULTS.decode,
        reducing_gap: float = DEFAULTS.reducing_gap,
        validate: str = DEFAULTS.validate,
        accept_truncated: bool = DEFAULTS.accept_truncated,
        rank: int | None = DEFAULTS.rank,
        world_size: int | None = DEFAULTS.world_size,
        even_split: bool = DEFAULTS.even_split,
        order: str = DEFAULTS.order,
        shard_window: int = DEFAULTS.shard_window,
        quarantine: str | os.PathLike | None = None,
        device="cpu",
        pin_memory: bool | None = None,
        device_prefetch: int = DEFAULTS.device_prefetch,
        max_device_memory: int = DEFAULTS.max_device_memory,
        max_file_bytes: int = DEFAULTS.max_file_bytes,
        max_ring_bytes: int = DEFAULTS.max_ring_bytes,
    ):
        # The engine's options, by name: a bad value is a TypeError/ValueError naming it, raised here.
        spec = _options.build_from(locals())
        options = spec.loader
        if isinstance(source, (str, os.PathLike)):
            source = source_from_path(source)  # an ImageFolder tree, packed shards or tar shards
        native_source = getattr(source, "_native", None)
        if not isinstance(native_source, _native.Source):
            raise TypeError(f"source must be a chute source (chute.ImageFolder, ...), got {type(source).__name__}")
        device_kind, device_index = _delivery.parse_device(device)
        if quarantine is not None:
            quarantine = Quarantine(_validate.path("quarantine", quarantine))  # opened once here: fails now
        self.rank, self.world_size = options.rank, options.world_size
        self.source = source
        self.batch_size = options.batch_size
        self.dtype = spec.dtype
        self.seed = options.seed
        self.shuffle = options.shuffle
        self.drop_last = options.drop_last
        self.even_split = options.even_split
        self.order = options.order
        self.shard_window = options.shard_window
        self._epoch = 0  # the epoch the next iteration runs
        self._running: int | None = None  # the epoch of the iteration in progress
        self._resume_position = 0  # where the next iteration starts in its epoch (load_state_dict)
        self._resume_splits: list = []  # the next epoch is the rest of one split before (_resume_state.py)
        self._running_splits: list = []  # the running epoch's, and its size for this rank
        self._running_size = 0
        self._iteration = 0
        self._pid = os.getpid()  # in a forked child the native loader is inert (its threads are not there)
        self._close_lock = threading.Lock()
        self._closed = False
        self._quarantine = quarantine
        self._errors_seen = 0  # errors() already written to the quarantine file
        # GPU delivery (chute/delivery.py): uint8 crosses PCIe, Normalize and the dtype happen on the device.
        normalize, native_device, host_blocks = None, None, None
        if device_kind != "cpu":
            transforms, normalize = _delivery.split_normalize(transforms)
            options.dtype = "uint8"
            native_device = _delivery.open_device(device_kind, device_index, options.seed)
            options.prepare_delivery(native_device, spec.delivery)  # pinned ring buffers, room for copies in flight
            if device_kind == "cuda":
                options.cpu_affinity = _native.cuda_local_cpus(device_index) or None
                cpus = len(options.cpu_affinity or ())
                if cpus and options.max_threads == 0 and options.num_threads <= cpus:
                    options.max_threads = cpus  # a thread per CPU of the GPU's node
        else:  # pinned buffers lent by torch's host allocator, handed over with each batch (delivery.py)
            host_blocks = _delivery.host_pinning(pin_memory)
            if host_blocks is not None:
                options.lend_blocks(host_blocks.pool)
        self.device = (
            "sim"
            if device_kind == "sim"
            else torch.device(device_kind, device_index)
            if device_kind == "cuda"
            else torch.device("cpu")
        )
        self._native = _native.Loader(native_source, _options.native_transforms(transforms), options)
        _options.warn_notices(self._native, stacklevel=2)  # e.g. a prefetch lowered to fit max_memory
        self.pin_memory = self._native.pinned
        if self.drop_last and len(self._native) == 0:  # legal, as in torch, but never what was meant
            warnings.warn(
                f"chute.Loader: this rank visits {self._native.epoch_size} of the source's {len(source)} "
                f"samples per epoch (rank {self.rank} of world_size {self.world_size}), fewer than "
                f"batch_size={self.batch_size}: with drop_last=True every epoch yields no batch",
                UserWarning,
                stacklevel=2,
            )
        # What iteration drives: the host loader, or the DeviceLoader wrapping it.
        self._driver = self._native
        if host_blocks is not None:
            self._driver = _delivery.HandOver(self._native, host_blocks)
        if device_kind != "cpu":
            self._driver = _delivery.Delivery(
                self._native, native_device, device_kind, device_index, spec.dtype, normalize, spec.delivery
            )

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
        skipped = getattr(self.source, "skipped", None) or []  # members a tar source left out, by reason
        stats = LoaderStats(self._native.stats(), members_skipped={s["reason"]: s["count"] for s in skipped})
        remote_stats = getattr(self.source, "remote_stats", None)
        if remote_stats is not None and (io := remote_stats()) is not None:
            stats["remote"] = io
            if stats.get("limit") == "storage":
                stats["remote_limit"] = remote_limit(io)
                stats["verdict"] += f"; remote {stats['remote_limit']}: {remote_evidence(io)}"
        return stats

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
        self._epoch, self._resume_position = _validate.integer("epoch", epoch, 0, _validate.INT64_MAX), 0
        self._resume_splits = []

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:
            raise RuntimeError("the loader is closed: make a new chute.Loader to iterate again")
        self._iteration += 1
        epoch, start, splits = self._epoch, self._resume_position, self._resume_splits
        self._epoch, self._resume_position, self._resume_splits, self._running = epoch + 1, 0, [], epoch
        self._running_splits = splits
        self._running_size = _resume_state.shares(self, splits)[self.rank] if splits else self.num_samples
        self._driver.start_epoch(epoch, start, splits=splits)
        return _Epoch(self, self._iteration)

    def _next_batch(self, iteration: int):
        """The epoch's next batch, or None at its end; raises SampleError in place of a bad sample's batch
        (the epoch goes on), RuntimeError once the loader is closed or the iterator superseded."""
        if iteration != self._iteration:
            raise RuntimeError("this iterator was superseded: a newer iter(loader) restarted the loader")
        native = self._native
        try:
            batch = self._driver.next()
        except SampleError as e:  # made by the binding from the engine's record of the sample (index, path, reason)
            if self._quarantine is not None:
                self._quarantine.add(e)
            raise
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

    def state_dict(self) -> dict:
        """Where the loader is, as a small JSON-serialisable dict: loading it into a loader built the same
        way resumes with exactly the batches an uninterrupted run would yield next, whatever the thread
        count and however many batches were prefetched when it was taken. Positions count the samples this
        rank's consumer has received, not those prepared ahead. docs/ORDER.md ("Resume") has the format."""
        resume = _resume_state.Resume(self._epoch, self._resume_position, self._resume_splits)
        if self._running is not None:
            epoch, position = _resume_state.received(self._running, self._driver.position(), self._running_size)
            resume = _resume_state.Resume(epoch, position, self._running_splits if epoch == self._running else [])
        return _resume_state.make(self, resume)

    def load_state_dict(self, state: dict | list[dict]) -> None:
        """Resumes from :meth:`state_dict`: the next iteration continues that epoch at that position.

        ``state`` is this rank's own state, or every rank's (``[state_rank0, state_rank1, ...]``, or
        :func:`chute.merge_state_dicts` of them), which resumes on any ``world_size``: the same one
        continues each rank where it was; another splits the samples of the interrupted epoch that no old
        rank received among the new ranks, each once (with ``even_split=True`` fewer than ``world_size`` of
        them are left out, so that all ranks run the same number of steps); the epochs after it are this
        world size's own. A state that does not fit this loader (another dataset size, seed, batch size,
        order, rank, ...) is a ValueError naming the difference."""
        self._epoch, self._resume_position, self._resume_splits = _resume_state.check(state, self)
        self._iteration += 1  # an iteration in progress is superseded
        self._running = None

    @property
    def decode_warnings(self) -> int:
        """Decoder warnings that left their image intact (libjpeg's "extraneous bytes before marker" and
        the like), counted over the loader's life. Warnings that mean lost data are errors instead."""
        return self._native.decode_warnings

    def errors(self) -> list[SampleError]:
        """Samples skipped so far (``on_error='skip'``), oldest first."""
        return [SampleError(*e) for e in self._native.errors()]

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

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown may have torn down what close() uses: the native side
            pass  # closes itself when the object goes

    def __repr__(self) -> str:
        return (
            f"chute.Loader({self.source!r}, batch_size={self.batch_size}, dtype={self.dtype}, "
            f"num_threads={self.num_threads}, device={str(self.device)!r})"
        )


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
