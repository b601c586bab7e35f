"""chute.ray.pack: ``chute pack --part i --parts n`` as n Ray tasks, then ``chute merge``.

Why a retried task is safe. A part's files appear under their final names only when the part is complete:
its shards are written under temporary names of that attempt's own (``<shard>.tmp-<pid>-<random>``),
synced and renamed, and its part index (``part-i-of-n.chidx``) is renamed into place last. A part counts
as done once its part index exists, so:

- an attempt killed at any point leaves temporary files and, at most, shards already renamed but no part
  index; the retry writes the part again (its own temporary names, then the same final names);
- an attempt killed after its part index was renamed (before Ray heard back) makes the retry find the part
  done, and return at once;
- two attempts that both run to the end (a node that Ray gave up on but that still runs) write the same
  bytes: packing is deterministic (records in source order, shard ids from the shard's content), and each
  rename replaces a complete file with an identical one.

After the merge, temporary files that killed attempts left behind are removed. The result is byte-identical
to ``chute.pack(src, out, part=i, parts=n)`` run for every i on one machine, then ``chute.merge(out)``.
"""

from __future__ import annotations

import os
import time

import ray

from chute import packed as _packed
from chute.resolve import native_source

_POLL_S = 0.25


def _part_index(out: str, part: int, parts: int) -> str:
    return os.path.join(out, f"part-{part:05d}-of-{parts:05d}.chidx")  # pack_writer.cc's part_index_name


@ray.remote(num_cpus=0)
class _Progress:
    """Samples packed so far, per part, reported by the tasks (a retried part starts again from 0)."""

    def __init__(self):
        self.done: dict[int, int] = {}
        self.total: dict[int, int] = {}

    def report(self, part: int, samples: int, total: int) -> None:
        self.done[part], self.total[part] = samples, total

    def get(self) -> tuple[int, int]:
        return sum(self.done.values()), sum(self.total.values())


def _pack_part(src, out: str, part: int, parts: int, options: dict, progress, test_hook):
    """One part (runs in a Ray task): skipped when an earlier attempt finished it."""
    if os.path.exists(_part_index(out, part, parts)):
        return {"part": part, "reused": True, "skipped": []}

    def report(samples: int, nbytes: int, total: int) -> None:
        if test_hook is not None:
            test_hook("progress", part, samples)
        if progress is not None:
            progress.report.remote(part, samples, total)

    summary = _packed.pack(src, out, part=part, parts=parts, progress=report, **options)
    if test_hook is not None:
        test_hook("done", part, summary.samples)
    return {"part": part, "reused": False, "skipped": summary.skipped}


def _default_parts(n_samples: int, num_cpus: float) -> int:
    cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(n_samples, cluster_cpus // max(1, int(num_cpus)) or 1))


def _remove_leftovers(out: str) -> int:
    """Temporary files of killed attempts (``*.tmp-<pid>-<random>``): after the merge no attempt writes."""
    removed = 0
    for name in os.listdir(out):
        if ".tmp-" in name or name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(out, name))
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def pack(
    src,
    out: str | os.PathLike,
    parts: int | None = None,
    *,
    shard_size: str | int = "1GB",
    num_cpus: float = 1,
    threads_per_task: int | None = None,
    validate: str = "header",
    skip_bad: bool = False,
    max_pixels: int = 200_000_000,
    max_file_bytes: int = 1 << 30,
    max_retries: int = 3,
    task_options: dict | None = None,
    progress: bool = True,
    _test_hook=None,
    **store_options,
) -> _packed.PackSummary:
    """Packs ``src`` (a path every node can read: an ImageFolder directory, a file list, tar shards, a
    packed dataset) into ``out`` (a directory every node can write) as ``parts`` Ray tasks, then merges.

    ``parts`` defaults to the cluster's CPUs divided by ``num_cpus`` (the CPUs each task reserves; its
    reader threads default to the same number). A task that fails from a worker or node loss is retried
    up to ``max_retries`` times (see the module's doc: a retry never duplicates or tears a part).
    ``task_options`` goes to ``.options()`` of each task, e.g. ``{"resources": {"cpu_node": 1}}``.
    With ``progress``, a rich bar in the driver counts samples across the tasks. Returns the merge's
    :class:`chute.packed.PackSummary` (``skipped`` lists the files ``skip_bad`` left out).
    ``store_options`` (``max_side``, ``max_shorter_side``, ``quality``, ``keep_original``, ``raw``,
    ``raw_below``, ``raw_compression``, ``subsampling``) go to every part's :func:`chute.pack` unchanged.
    """
    if not ray.is_initialized():
        ray.init()  # RAY_ADDRESS, a cluster `ray start` began on this machine, else a local one
    src = os.fspath(src)
    out = os.path.abspath(os.fspath(out))
    if parts is None:
        parts = _default_parts(len(native_source(src)[0]), num_cpus)
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ValueError(f"parts must be a positive int, got {parts!r}")
    if os.path.exists(os.path.join(out, _packed.INDEX_FILE)):
        raise ValueError(f"{out} already holds a packed dataset ({_packed.INDEX_FILE}); remove it or pack elsewhere")
    os.makedirs(out, exist_ok=True)
    options = {
        "shard_size": shard_size,
        "num_threads": threads_per_task or max(1, int(num_cpus)),
        "validate": validate,
        "skip_bad": skip_bad,
        "max_pixels": max_pixels,
        "max_file_bytes": max_file_bytes,
        **store_options,
    }
    start = time.perf_counter()
    tracker = _Progress.remote() if progress else None
    task = ray.remote(_pack_part).options(
        num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False, **(task_options or {})
    )
    refs = [task.remote(src, out, i, parts, options, tracker, _test_hook) for i in range(parts)]
    results = _wait_with_progress(refs, tracker, src) if progress else ray.get(refs)
    merged = _packed.merge(out)
    _remove_leftovers(out)
    skipped = sorted(s for r in results for s in r["skipped"])
    return _packed.PackSummary(
        merged.samples,
        merged.payload_bytes,
        merged.file_bytes,
        merged.shards,
        time.perf_counter() - start,
        [tuple(s) for s in skipped],
        merged.source_bytes,
    )


def _wait_with_progress(refs: list, tracker, src: str) -> list:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    pending = list(refs)
    with Progress(
        TextColumn(f"packing {src} on Ray"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[parts]}"),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        row = bar.add_task("pack", total=None, parts="")
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=_POLL_S)
            done, total = ray.get(tracker.get.remote())
            bar.update(
                row, completed=done, total=total or None, parts=f"{len(refs) - len(pending)}/{len(refs)} parts done"
            )
    return ray.get(refs)  # raises a task's error (after its retries)
