"""The one way chute's benchmarks time things: an epoch (or any timed unit), contenders interleaved round by
round, and the median and range of each.

* :func:`time_epoch` times one pass over a loader, from ``iter()`` to its last batch, counting the samples
  the consumer received (a consumer step, if any, runs inside the timed span: ``on_batch``). The time to
  its first batch is kept apart too (``Timing.first``), so that a pass's start-up (workers, an index,
  the first fetch) and the rest of it (``Timing.after_first()``) are reported separately where they differ.
* :func:`time_call` times one call of anything that returns how many items it handled (a scan, a pack).
* :func:`interleave` runs every contender's warm-up first, then ``rounds`` rounds in which each contender
  measures once, in the order given: load from other processes on a shared machine falls on all alike.
* :class:`Summary` is the median of a contender's figures and their range (lowest, highest).

Clocks are parameters (``clock`` for wall time, ``cpu_clock`` for CPU time), so that the harness can be
tested with a fake clock, and so that a caller can synchronise a device inside its clock.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chute._batches import batch_samples  # what the consumer received: one definition

Clock = Callable[[], float]


@dataclass
class Timing:
    """One timed unit: ``items`` handled in ``seconds`` of wall time (``cpu_seconds`` of CPU time when a
    CPU clock was given), over ``batches`` batches; ``extra`` holds a caller's own figures of that unit."""

    items: float
    seconds: float
    batches: int = 0
    cpu_seconds: float | None = None
    extra: dict = field(default_factory=dict)
    first: Timing | None = None  # time_epoch(): the pass up to its first batch's arrival (that batch counted)

    @property
    def rate(self) -> float:
        """Items per second (0 for a unit that took no time)."""
        return self.items / self.seconds if self.seconds > 0 else 0.0

    @property
    def rate_per_cpu_second(self) -> float:
        """Items per CPU-second (nan without a CPU clock or CPU time)."""
        return self.items / self.cpu_seconds if self.cpu_seconds else float("nan")

    def after_first(self) -> Timing:
        """The pass from its first batch on: what is left once its start-up is paid (its first batch not
        counted). Only for a timing of :func:`time_epoch` that received a batch."""
        if self.first is None:
            raise ValueError("no first batch was timed (time_epoch() over an empty or unstarted pass)")
        cpu = None if self.cpu_seconds is None else self.cpu_seconds - self.first.cpu_seconds
        return Timing(self.items - self.first.items, self.seconds - self.first.seconds, self.batches - 1, cpu)

    @classmethod
    def of_rate(cls, rate: float, **extra) -> Timing:
        """A unit measured elsewhere that reports only its rate (one second's worth of items)."""
        return cls(items=rate, seconds=1.0, extra=extra)


@dataclass(frozen=True)
class Summary:
    """The median of a set of figures and their range."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Summary:
        values = list(values)
        if not values:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(statistics.median(values), min(values), max(values), len(values))

    def range_text(self, fmt: str = ".0f") -> str:
        """``"low-high"``, formatted with ``fmt``."""
        return f"{self.low:{fmt}}-{self.high:{fmt}}"


class Rated:
    """For a class with ``rates`` (a contender, a report row): the median rate and the range."""

    rates: list[float]

    @property
    def summary(self) -> Summary:
        return Summary.of(self.rates)

    @property
    def rate(self) -> float:
        """The median rate, 0 before any was measured."""
        return self.summary.median if self.rates else 0.0


def time_epoch(
    batches: Iterable,
    *,
    max_batches: int | None = None,
    skip: int = 0,
    count: Callable[[Any], int] = batch_samples,
    on_batch: Callable[[Any], None] | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock | None = None,
) -> Timing:
    """Times one pass over ``batches`` (from ``iter()`` to the last batch, or to the ``max_batches``-th),
    counting the samples of each batch with ``count``. ``on_batch(batch)`` runs on each batch inside the
    timed span (a simulated or real consumer step). ``cpu_clock`` also measures CPU time over the same span.
    ``batches`` may be a generator that opens what it iterates: its opening is then timed too. ``skip``
    batches are taken first, before the clock starts (a warm-up inside the pass: workers or actors that
    start with it), neither timed nor counted."""

    def cpu() -> float | None:
        return cpu_clock() - cpu0 if cpu_clock is not None else None

    if skip:
        batches = iter(batches)
        for _ in itertools.islice(batches, skip):
            pass
    cpu0 = cpu_clock() if cpu_clock is not None else None
    start = clock()
    items = n = 0
    first = None
    if max_batches is None or max_batches > 0:
        for batch in batches:
            k = count(batch)
            if first is None:
                first = Timing(k, clock() - start, 1, cpu())
            items += k
            n += 1
            if on_batch is not None:
                on_batch(batch)
            del batch
            if max_batches is not None and n >= max_batches:
                break
    seconds = clock() - start
    return Timing(items, seconds, n, cpu(), first=first)


def time_call(fn: Callable[[], float], *, clock: Clock = time.perf_counter) -> Timing:
    """Times one call of ``fn``, which returns how many items it handled."""
    start = clock()
    items = fn()
    return Timing(items, clock() - start)


@dataclass
class Contender(Rated):
    """One configuration under measurement: ``measure()`` times one unit of it (an epoch, a call)."""

    name: str
    measure: Callable[[], Timing]
    timings: list[Timing] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # the caller's own description (kind, cores, ...)
    warm: bool = True  # whether interleave() runs its warm-up units (False: a measure that needs none)

    @property
    def rates(self) -> list[float]:
        """Items per second of each timing (``rate`` is their median, ``summary`` adds the range)."""
        return [t.rate for t in self.timings]

    @property
    def seconds(self) -> Summary:
        """Median and range of the wall times."""
        return Summary.of(t.seconds for t in self.timings)

    def summarize(self, figure: Callable[[Timing], float]) -> Summary:
        """Median and range of any figure of the timings."""
        return Summary.of(figure(t) for t in self.timings)


def interleave(
    contenders: Sequence[Contender], *, rounds: int, warmup: int = 1, on_step: Callable[[str], None] = lambda _: None
) -> Sequence[Contender]:
    """Measures the contenders round by round: first ``warmup`` untimed units of each contender that is
    ``warm`` (in order: worker start-up, page cache, buffers faulted in), then ``rounds`` rounds, each
    contender once per round in the order given. Appends each timing to its contender's ``timings`` and returns the contenders."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for w in range(warmup):
        for c in (c for c in contenders if c.warm):
            on_step(f"warm-up {w + 1}/{warmup}: {c.name}" if warmup > 1 else f"warm-up: {c.name}")
            c.measure()
    for r in range(rounds):
        for c in contenders:
            on_step(f"round {r + 1}/{rounds}: {c.name}")
            c.timings.append(c.measure())
    return contenders
