"""chute.LoaderStats: a loader's statistics as a dict, with a readable summary."""

from __future__ import annotations


class LoaderStats(dict):
    """What :meth:`chute.Loader.stats` returns: a plain ``dict`` of numbers (JSON-serialisable) whose
    ``str()`` is a short report.

    Times are seconds since the loader was created or :meth:`chute.Loader.reset_stats`. Stage times are
    busy time summed over worker threads: ``read_s`` (the source: storage), ``decode_s``, ``transform_s``
    (resample and write the output), ``batch_s`` (placing samples and publishing batches), plus
    ``worker_cpu_s`` and ``worker_idle_s`` (active workers with nothing they were allowed to start). On the
    consumer's side, ``wait_s`` is the data stall (time blocked in ``next()``; ``fill_wait_s`` of it before
    each epoch's first batch) and ``consumer_s`` its own time between batches; ``stall_fraction`` is
    ``wait_s / (wait_s + consumer_s)``. ``mean_ready_batches`` is the queue occupancy the consumer found.
    ``bound`` is ``"input"``, ``"consumer"`` or ``"unknown"``; when input-bound, ``limit`` names the stage
    (``"storage"``, ``"decode"``, ``"transform"``), and ``verdict`` gives the numbers behind it.
    ``batch_buffer_bytes`` is one batch buffer's size and ``batch_buffer_held_bytes`` the memory it holds,
    which is what ``max_memory`` counts: more where the buffers are torch's pinned blocks, which torch rounds
    up to a power of two (``pin_memory``). ``members_skipped`` counts, by reason, the members of a tar source that are in no sample (links out
    of the archive, non-image files...; see :attr:`chute.TarDataset.skipped`).
    """

    def __str__(self) -> str:
        s = self
        n = max(s["samples"], 1)
        busy = s["read_s"] + s["decode_s"] + s["transform_s"]

        def stage(name: str, seconds: float) -> str:
            share = f" ({100 * seconds / busy:.0f}%)" if busy > 0 else ""
            return f"{name} {1e3 * seconds / n:.3f} ms{share}"

        rate = s["samples_delivered"] / s["elapsed_s"] if s["elapsed_s"] > 0 else 0.0
        active_time = busy + s["worker_idle_s"]
        idle = f", idle {100 * s['worker_idle_s'] / active_time:.0f}% of their time" if active_time > 0 else ""
        auto = lambda flag: " (auto)" if flag else ""  # noqa: E731
        held = s.get("batch_buffer_held_bytes", s["batch_buffer_bytes"])
        rounded = f" (each holds {held / 1e6:,.1f} MB: rounded blocks)" if held > s["batch_buffer_bytes"] else ""
        lines = [
            f"chute.Loader stats over {s['elapsed_s']:.1f} s: {s['samples_delivered']:,} samples delivered "
            f"({rate:,.0f}/s) in {s['batches']:,} batches, {s['bytes_read'] / 1e6:,.1f} MB read, "
            f"{s['errors_skipped']} skipped, {s['decode_warnings']} decode warnings",
            "  worker time per sample: "
            + " | ".join(
                [stage("read", s["read_s"]), stage("decode", s["decode_s"]), stage("transform", s["transform_s"])]
            )
            + f" | batch {1e3 * s['batch_s'] / n:.3f} ms",
            f"  workers: {s['active_threads']} of {s['threads']} threads active{auto(s['auto_threads'])}, "
            f"{1e3 * s['worker_cpu_s'] / n:.3f} ms CPU per sample{idle}",
            f"  queue: prefetch {s['prefetch']} batches{auto(s['auto_prefetch'])}, {s['batch_buffers']} buffers of "
            f"{s['batch_buffer_bytes'] / 1e6:,.1f} MB{rounded}, {s['mean_ready_batches']:.1f} ready on average "
            "when asked",
            f"  consumer: waited {s['wait_s']:.2f} s ({100 * s['stall_fraction']:.0f}% of its time; "
            f"{s['fill_wait_s']:.2f} s before first batches), own work {s['consumer_s']:.2f} s",
            f"  verdict: {s['verdict']}",
        ]
        if s.get("remote"):
            io = s["remote"]
            lines.append(
                f"  remote: {io['requests']:,} requests, {io['bytes'] / 1e6:,.1f} MB, {io['retries']} retries, "
                f"p50 {1e3 * io['latency_p50_s']:.0f} ms, p99 {1e3 * io['latency_p99_s']:.0f} ms; shards: "
                f"{io['shard_fetches']} fetched, {io['cache_hits']} from the cache, {io['reader_waits']} reads "
                f"waited {io['reader_wait_s']:.2f} s"
            )
        if s.get("members_skipped"):
            lines.append(
                "  source: members in no sample: "
                + ", ".join(f"{n} {reason}" for reason, n in s["members_skipped"].items())
            )
        return "\n".join(lines)


def remote_limit(io: dict) -> str:
    """Which side of remote storage limits a storage-bound loader: ``"latency"`` when a read that waited
    for its shard waited about one request's time (a round trip: fetching further ahead hides it), else
    ``"bandwidth"`` (the wait spans many requests' transfer: a faster link, or fewer bytes, helps)."""
    waits, p50 = io.get("reader_waits", 0), io.get("latency_p50_s", 0.0)
    if not waits or p50 <= 0:
        return "latency"
    return "latency" if io["reader_wait_s"] / waits <= 2 * p50 else "bandwidth"


def remote_evidence(io: dict) -> str:
    """The figures behind :func:`remote_limit`, in words."""
    waits = io.get("reader_waits", 0)
    mean = 1e3 * io["reader_wait_s"] / waits if waits else 0.0
    return (
        f"{waits} reads waited for a shard (mean {mean:.0f} ms); requests p50 {1e3 * io.get('latency_p50_s', 0):.0f} "
        f"ms, p99 {1e3 * io.get('latency_p99_s', 0):.0f} ms, {io.get('in_flight_limit', 0)} in flight at most, "
        f"{io.get('retries', 0)} retries"
    )
