"""The measured run: the consumer's wait for each batch (the data stall), the step's own time, and the CPU
and GPU timelines sampled meanwhile.

``run_loader`` drives a loader with an optional step function; :class:`Watch` measures a loop someone else
drives (``chute.doctor.watch``). Both produce a :class:`Run`.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

from chute._batches import batch_samples, batch_tensors  # what the consumer received: one definition
from chute.doctor.cpu import CpuSampler, CpuTimeline
from chute.doctor.device import GpuTimeline
from chute.doctor.remote import is_remote


@dataclass
class Transfer:
    """A tensor moved to another device inside the step, as seen by :class:`TransferSpy`."""

    target: str
    non_blocking: bool
    pinned: bool
    bytes: int


class TransferSpy(TorchFunctionMode):
    """Records ``Tensor.to(device)`` / ``.cuda()`` calls that change a tensor's device, with their
    ``non_blocking`` flag, while active (only around the warm-up steps: a mode sees every torch call)."""

    def __init__(self):
        super().__init__()
        self.transfers: list[Transfer] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("to", "cuda") and args and isinstance(args[0], torch.Tensor):
            src = args[0]
            target = kwargs.get("device")
            if target is None and len(args) > 1 and isinstance(args[1], (str, torch.device)):
                target = args[1]
            if name == "cuda" and target is None:
                target = "cuda"
            non_blocking = bool(
                kwargs.get("non_blocking", False) or (len(args) > 2 and isinstance(args[2], bool) and args[2])
            )
            if target is not None and torch.device(target).type != src.device.type:
                pinned = src.device.type == "cpu" and torch.cuda.is_available() and src.is_pinned()
                self.transfers.append(
                    Transfer(str(torch.device(target)), non_blocking, pinned, src.numel() * src.element_size())
                )
        return func(*args, **kwargs)


@dataclass
class Step:
    start: float  # seconds since the run started, when the consumer asked for the batch
    wait_s: float  # blocked in next(): the data stall
    step_s: float  # the step's own time (0 without a step)
    samples: int


@dataclass
class Run:
    """One measured stretch of a loader. ``steps`` holds every batch; the first ``warmup`` are excluded
    from the figures (they pay start-up: worker processes, thread pools, the first fill)."""

    label: str
    steps: list[Step]
    warmup: int
    with_step: bool
    batch_bytes: int = 0  # bytes of the tensors in one batch
    first_batch_s: float = 0.0  # from iter() to the first batch: start-up and fill
    cpu: CpuTimeline = field(default_factory=CpuTimeline)
    gpu: GpuTimeline | None = None
    transfers: list[Transfer] = field(default_factory=list)
    loader_stats: dict | None = None  # chute.Loader.stats() over the measured steps
    remote_stats: dict | None = None  # a chute.ray.RemoteLoader's stats_since() over the measured steps
    dtype: str = ""  # the first tensor's dtype (the images, usually)
    sample: list[torch.Tensor] = field(default_factory=list)  # a copy of the first batch, when kept

    @property
    def measured(self) -> list[Step]:
        return self.steps[self.warmup :]

    @property
    def measured_start(self) -> float:
        return self.measured[0].start if self.measured else 0.0

    @property
    def wait_s(self) -> float:
        return sum(s.wait_s for s in self.measured)

    @property
    def step_s(self) -> float:
        return sum(s.step_s for s in self.measured)

    @property
    def stall_fraction(self) -> float:
        total = self.wait_s + self.step_s
        return self.wait_s / total if total > 0 else 0.0

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.measured)

    @property
    def rate(self) -> float:
        """Samples per second the consumer received (wait + step time)."""
        total = self.wait_s + self.step_s
        return self.samples / total if total > 0 else 0.0

    def stall_interval(self, confidence: float = 0.95, resamples: int = 1000) -> tuple[float, float]:
        """A bootstrap confidence interval of :attr:`stall_fraction` over the measured batches (resampled
        with replacement, a fixed seed so that the same run gives the same interval)."""
        steps = self.measured
        if len(steps) < 2:
            return self.stall_fraction, self.stall_fraction
        rng = random.Random(0)
        n = len(steps)
        fractions = []
        for _ in range(resamples):
            pick = [steps[rng.randrange(n)] for _ in range(n)]
            wait = sum(s.wait_s for s in pick)
            total = wait + sum(s.step_s for s in pick)
            fractions.append(wait / total if total > 0 else 0.0)
        fractions.sort()
        tail = (1 - confidence) / 2
        return fractions[int(tail * (resamples - 1))], fractions[int((1 - tail) * (resamples - 1))]

    def settled(self, threshold: float) -> bool:
        """Whether the stall's confidence interval lies wholly on one side of ``threshold``."""
        lo, hi = self.stall_interval()
        return lo >= threshold or hi < threshold

    @property
    def fetch_ms(self) -> list[float]:
        return [1e3 * s.wait_s for s in self.measured]

    @property
    def median_fetch_ms(self) -> float:
        return statistics.median(self.fetch_ms) if self.measured else 0.0

    @property
    def median_step_ms(self) -> float:
        return statistics.median(1e3 * s.step_s for s in self.measured) if self.measured else 0.0


class Recorder:
    """Times batches as a consumer receives them: ``wait()`` around the fetch, ``step()`` after the work.
    Shared by :func:`run_loader` and :class:`Watch`."""

    def __init__(self, label: str, warmup: int, with_step: bool, keep_first: bool = False):
        self.run = Run(label, [], warmup, with_step)
        self.t0 = time.perf_counter()
        self.keep_first = keep_first

    def record(self, ask: float, got: float, done: float, samples: int) -> None:
        self.run.steps.append(Step(ask - self.t0, got - ask, done - got, samples))

    def first(self, batch, seconds: float) -> None:
        """The first batch: its size in bytes, and the time from iter() to it (start-up and fill)."""
        tensors = batch_tensors(batch)
        self.run.batch_bytes = sum(t.numel() * t.element_size() for t in tensors)
        self.run.first_batch_s = seconds
        self.run.dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else ""
        if self.keep_first:  # the device layer times copying it; the loader's buffer goes back at once
            self.run.sample = [t.clone() for t in tensors]


# The engine's counters (chute.LoaderStats names; what chute::Loader's stats baseline subtracts, plus the
# time and process CPU since it): the figures a snapshot difference measures. Everything else in a stats
# dict is a setting or a figure of the moment (threads, prefetch, max_prefetch, cores, auto flags, buffer
# sizes, mean_ready_batches: the loader's lifetime mean) and is kept as at the end. Differencing a setting
# made max_prefetch 0 and so let the verdict call auto prefetch below its cap "prefetch".
_COUNTERS = (
    "elapsed_s",
    "process_cpu_s",
    "samples",
    "samples_delivered",
    "batches",
    "errors_skipped",
    "decode_warnings",
    "bytes_read",
    "read_s",
    "decode_s",
    "transform_s",
    "batch_s",
    "worker_cpu_s",
    "worker_idle_s",
    "wait_s",
    "fill_wait_s",
    "consumer_s",
    # chute.DataLoader's own batch counters
    "arena_batches",
    "shared_batches",
)


def engine_stats(loader) -> dict | None:
    """chute's engine statistics for a loader that runs on it: a :class:`chute.Loader`, or a
    :class:`chute.DataLoader` that took a native fast path with engine stages (the ImageFolder path); None
    for anything else (torch's DataLoader, chute.DataLoader's generic path, the tensor gather path)."""
    import chute

    if isinstance(loader, chute.Loader):
        return dict(loader.stats())
    if isinstance(loader, chute.DataLoader):
        s = loader.stats()
        if str(s.get("path", "")).startswith("fast:") and "decode_s" in s:
            return dict(s)
    return None


def stats_since(before: dict | None, after: dict | None) -> dict | None:
    """The engine's counters (:data:`_COUNTERS`) between two :func:`engine_stats` snapshots, every other
    figure (settings such as ``max_prefetch``) as at the end, with chute's verdict on them
    (``chute._native.diagnose``, the loader's own verdict engine)."""
    from chute import _native

    if after is None:
        return None
    if before is None:
        out = dict(after)
    else:
        out = {k: v - before.get(k, 0) if k in _COUNTERS else v for k, v in after.items()}
    if isinstance(after.get("remote"), dict) and before is not None and isinstance(before.get("remote"), dict):
        out["remote"] = {  # counters over the measured steps; figures of the moment (latency, in flight) as at the end
            k: v - before["remote"].get(k, 0) if k in _REMOTE_COUNTERS else v for k, v in after["remote"].items()
        }
    total = out.get("wait_s", 0) + out.get("consumer_s", 0)
    out["stall_fraction"] = out.get("wait_s", 0) / total if total > 0 else 0.0
    out.update(_native.diagnose(out))
    if out.get("limit") == "storage" and isinstance(out.get("remote"), dict):  # as chute.Loader.stats() says it
        from chute.stats import remote_evidence, remote_limit

        out["remote_limit"] = remote_limit(out["remote"])
        out["verdict"] += f"; remote {out['remote_limit']}: {remote_evidence(out['remote'])}"
    return out


# The remote figures that count up (differenced between two snapshots); the rest are of the moment.
_REMOTE_COUNTERS = (
    "requests",
    "bytes",
    "retries",
    "failures",
    "shard_fetches",
    "cache_hits",
    "reader_waits",
    "reader_wait_s",
)


class LoaderSpan:
    """The loader's own figures over the measured steps, for the loaders that keep them: chute's engine
    counters (:func:`engine_stats`, into ``run.loader_stats``) or a RemoteLoader's (``stats_since``, into
    ``run.remote_stats``). ``start()`` at the first measured batch, ``finish(run)`` after the last; a loader
    that ended before its first measured batch gives its figures since it started."""

    def __init__(self, loader):
        import chute

        self.loader = loader
        self.engine = isinstance(loader, (chute.Loader, chute.DataLoader))
        self.remote = is_remote(loader)
        self.before: dict | None = None

    def start(self) -> None:
        if self.engine:
            self.before = engine_stats(self.loader)
        elif self.remote:
            self.before = self.loader.stats()

    def finish(self, run: Run) -> None:
        if self.engine:
            run.loader_stats = stats_since(self.before, engine_stats(self.loader))
        elif self.remote:
            run.remote_stats = self.loader.stats_since(self.before)


def _close_iterator(iterator) -> None:
    shutdown = getattr(iterator, "_shutdown_workers", None)  # a DataLoader's multiprocess iterator
    if shutdown is not None:
        shutdown()


def run_loader(
    loader,
    step_fn: Callable | None,
    *,
    steps: int,
    warmup: int,
    label: str,
    gpu_sampler_factory: Callable | None = None,
    spy_steps: int = 2,
    close_workers: bool = False,
    max_steps: int | None = None,
    threshold: float | None = None,
    min_seconds: float = 0.0,
) -> Run:
    """Iterates ``warmup + steps`` batches (fewer if the loader ends first), calling ``step_fn(batch)`` on
    each. With ``max_steps`` and ``threshold``, it goes on measuring, ``steps`` batches at a time, while the
    stall's confidence interval still contains ``threshold`` (:meth:`Run.settled`) or the measured batches
    span less than ``min_seconds`` (the engine's CPU and stage shares over a few scheduler slices swing with
    whatever else ran then), up to ``max_steps`` measured batches or the end of the loader. Raises ``ValueError`` for a loader that yields nothing; the
    loader's and the step's own exceptions propagate, with a note saying which batch they came from."""
    recorder = Recorder(label, warmup, step_fn is not None, keep_first=gpu_sampler_factory is not None)
    run = recorder.run
    span = LoaderSpan(loader)
    gpu = gpu_sampler_factory() if gpu_sampler_factory else None
    with CpuSampler() as cpu_sampler:
        if gpu is not None:
            gpu.__enter__()
        iterator = None
        try:
            recorder.t0 = cpu_sampler.start_time
            start = time.perf_counter()
            iterator = iter(loader)
            i, limit = 0, warmup + steps
            while i < limit:
                if i == warmup:
                    span.start()
                ask = time.perf_counter()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                except Exception as e:
                    e.add_note(f"chute.doctor: raised by the loader while fetching batch {i}")
                    raise
                got = time.perf_counter()
                if i == 0:
                    recorder.first(batch, got - start)
                if step_fn is not None:
                    try:
                        if i < spy_steps:
                            with TransferSpy() as spy:
                                step_fn(batch)
                            run.transfers.extend(spy.transfers)
                        else:
                            step_fn(batch)
                    except Exception as e:
                        e.add_note(f"chute.doctor: raised by step_fn on batch {i}")
                        raise
                recorder.record(ask, got, time.perf_counter(), batch_samples(batch))
                del batch
                i += 1
                if (
                    i == limit
                    and max_steps is not None
                    and threshold is not None
                    and run.with_step
                    and limit - warmup < max_steps
                    and (not run.settled(threshold) or run.wait_s + run.step_s < min_seconds)
                ):
                    limit = min(limit + steps, warmup + max_steps)
        finally:
            if gpu is not None:
                gpu.__exit__(None, None, None)
            if close_workers:
                _close_iterator(iterator)
    run.cpu = cpu_sampler.timeline
    run.gpu = gpu.timeline if gpu is not None else None
    if not run.steps:
        raise ValueError(f"chute.doctor: the loader ({label}) yielded no batches; nothing to measure")
    if len(run.steps) <= warmup:  # a short loader: measure what there is, less the first batch's start-up
        run.warmup = min(1, len(run.steps) - 1)
    span.finish(run)
    return run
