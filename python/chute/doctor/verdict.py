"""The verdict: which layer limits the job, the evidence, and the changes ranked by expected gain
(``advice.py``). It reads the :class:`~chute.doctor.findings.Findings` and builds their
:class:`~chute.doctor.findings.Verdict`.
"""

from __future__ import annotations

from chute import _native
from chute.doctor import advice
from chute.doctor.cpu import worker_figures
from chute.doctor.findings import MIN_VERDICT_BATCHES, Findings, Recommendation, Verdict

# The thresholds are the engine's (chute/stats.h): the doctor's verdict and loader.stats() come from the one
# verdict engine, chute::diagnose, so they cannot disagree.
INPUT_BOUND_STALL = _native.INPUT_BOUND_STALL  # the step waits at least this share of its time: input-bound
# The engine's limit -> the doctor's (layer, stage).
_LAYER = {
    "storage": ("storage", "read"),
    "decode": ("cpu", "decode"),
    "transform": ("cpu", "transform"),
    "prefetch": ("cpu", "prefetch"),
    "cores": ("cpu", "cores"),
}


def engine_verdict(d: Findings) -> dict:
    """chute's verdict (``bound``, ``limit``, ``stage``, ``verdict``) on the measured run: the loader's own
    for a loader on chute's engine, else the same engine (``chute._native.diagnose``) on the figures measured
    here: the per-sample stage times of the profile, the run's wait and step time, and /proc's CPU."""
    s = d.run.loader_stats
    if s is not None and s.get("bound"):
        return s
    run, c, info = d.run, d.cpu, d.dataloader
    ms = d.stage_shares().ms
    n = run.samples
    busy = {k: ms.get(k, 0.0) * n / 1e3 for k in ("read", "decode", "transform")}
    busy["transform"] += ms.get("other", 0.0) * n / 1e3
    elapsed = run.wait_s + run.step_s
    figures = {
        "samples": n,
        "samples_delivered": n,
        "batches": len(run.measured),
        "elapsed_s": elapsed,
        "wait_s": run.wait_s,
        "consumer_s": run.step_s if run.with_step else 0.0,
        "read_s": busy["read"],
        "decode_s": busy["decode"],
        "transform_s": busy["transform"],
    }
    total_busy = sum(busy.values())
    figures["worker_cpu_s"] = total_busy
    if c is not None:
        figures["cores"] = c.cores
        figures["process_cpu_s"] = c.total_cores_used * elapsed
        if info is not None and info.num_workers > 0:
            figures.update(worker_figures(total_busy, c, info.num_workers))
    if not run.with_step:
        figures["consumer_s"] = 0.0
    return _native.diagnose(figures)


def _fmt_rate(rate: float) -> str:
    return f"{rate:,.0f}"


def decide(d: Findings) -> Verdict:
    run = d.run
    stall = run.stall_fraction
    ms, shares, where = d.stage_shares()
    evidence: list[str] = []
    recs: list[Recommendation] = []

    if run.with_step:
        evidence.append(
            f"the step waited {100 * stall:.0f}% of its time for data: median fetch "
            f"{run.median_fetch_ms:.1f} ms, median step {run.median_step_ms:.1f} ms per batch, over "
            f"{len(run.measured)} batches ({_fmt_rate(run.rate)} samples/s)"
        )
    else:
        evidence.append(
            f"the loader alone (a consumer that does nothing) delivered {_fmt_rate(run.rate)} samples/s: "
            f"median fetch {run.median_fetch_ms:.1f} ms per batch of {run.steps[0].samples}"
        )

    if ms:
        total = sum(ms.values())
        parts = ", ".join(f"{k} {v:.2f} ms ({100 * shares[k]:.0f}%)" for k, v in ms.items())
        evidence.append(f"worker time per sample {total:.2f} ms: {parts} ({where})")
    _cpu_evidence(d, evidence)
    _storage_evidence(d, evidence)
    if d.device is not None and d.device.available:
        u = d.device.util_stats(run.measured_start)
        if u:
            evidence.append(
                f"GPU utilisation mean {u['mean']:.0f}% (p10 {u['p10']:.0f}%, p90 {u['p90']:.0f}%), "
                f"idle (<10%) {100 * u['idle_fraction']:.0f}% of samples at {d.device.sample_hz:.0f} Hz"
            )

    lo, hi = run.stall_interval()
    if run.with_step:
        evidence.append(
            f"the stall's 95% confidence interval: {100 * lo:.0f}-{100 * hi:.0f}% over "
            f"{len(run.measured)} measured batches (threshold {100 * INPUT_BOUND_STALL:.0f}%)"
        )
    if len(run.measured) < MIN_VERDICT_BATCHES:
        return _too_few(d, evidence)
    if d.remote is not None:
        return _remote_verdict(d, evidence, lo, hi)
    engine = engine_verdict(d)
    if engine.get("bound") == "unknown":  # the engine's own figures are too few (no batch counted in them)
        evidence.append(f"chute's verdict: {engine.get('verdict')}")
        return _too_few(d, evidence)
    io = (run.loader_stats or {}).get("remote")
    if isinstance(io, dict):
        evidence.append(
            f"remote storage: {io['requests']:,} requests, {io['bytes'] / 1e6:,.1f} MB, {io['retries']} retries, "
            f"latency p50 {1e3 * io['latency_p50_s']:.0f} ms, p99 {1e3 * io['latency_p99_s']:.0f} ms, "
            f"{io['in_flight']} in flight (limit {io['in_flight_limit']}); shards: {io['shard_fetches']} fetched, "
            f"{io['cache_hits']} cache hits; {io['reader_waits']} reads waited {io['reader_wait_s']:.2f} s"
        )
    if engine.get("verdict"):
        evidence.append(
            f"chute's verdict ({'loader.stats()' if run.loader_stats else 'its engine on these figures'}"
            f"): {engine['verdict']}"
        )
    if run.with_step and hi < INPUT_BOUND_STALL:
        headline = (
            f"consumer-bound: no input problem. The step waited for data {100 * stall:.0f}% of its time "
            f"({run.median_fetch_ms:.1f} ms per batch against {run.median_step_ms:.1f} ms of step)"
        )
        if d.device is not None and d.device.available:
            u = d.device.util_stats(run.measured_start)
            if u and u["mean"] < 70:
                evidence.append(
                    "the GPU is often idle while data is ready: look at the step itself "
                    "(host syncs such as .item(), small batches, CPU work in the step)"
                )
        return Verdict("consumer", "consumer", "step", headline, evidence, advice.rank(recs))

    limit = engine.get("limit") or engine.get("stage") or "decode"
    layer, stage = _LAYER.get(limit, ("cpu", limit))
    st = d.storage
    if st is not None and st.exceeds_page_cache and st.cold_rate_for(run.rate) < 1.0:
        evidence.append(
            f"the dataset ({st.dataset_bytes / 1e9:.1f} GB) exceeds the memory the page cache can use "
            f"({st.mem_available / 1e9:.1f} GB available) and cold reads "
            f"({st.cold.mb_per_s:.0f} MB/s) fall short of what {_fmt_rate(run.rate)} samples/s need: "
            f"once the cache is cold, storage will limit"
        )
    what = {"storage": "storage (reading the files)", "cpu": f"CPU ({stage})"}[layer]
    if stage == "cores":
        what = f"the CPU cores (contended; {engine.get('stage') or 'decode'} is the workers' busiest stage)"
    if run.with_step and lo < INPUT_BOUND_STALL:
        bound = "borderline"
        headline = (
            f"borderline: the step waited {100 * stall:.0f}% of its time for data (95% interval "
            f"{100 * lo:.0f}-{100 * hi:.0f}% over {len(run.measured)} batches) around the "
            f"{100 * INPUT_BOUND_STALL:.0f}% line; where the input falls short, {what} limits it"
        )
    elif run.with_step:
        bound = "input"
        headline = f"input-bound: the step waits {100 * stall:.0f}% of its time; {what} limits the loader"
    else:
        bound = "loader"
        headline = f"the loader alone delivers {_fmt_rate(run.rate)} samples/s; {what} limits it"

    advice.comparisons(d, recs)
    if layer == "storage" or (
        st is not None and (st.huge_directories or (st.exceeds_page_cache and st.cold_rate_for(run.rate) < 1.0))
    ):
        advice.storage(d, recs, shares.get("read", 0.0), ms)
    advice.cpu(d, recs, layer, stage)
    advice.device(d, recs)
    return Verdict(bound, layer, stage, headline, evidence, advice.rank(recs))


def _too_few(d: Findings, evidence: list[str]) -> Verdict:
    """No verdict from fewer than MIN_VERDICT_BATCHES measured batches, as chute's engine gives none ("not
    enough batches yet"); no change is recommended from them either."""
    n = len(d.run.measured)
    headline = (
        f"too few batches to tell what limits the loader: {n} measured after {d.run.warmup} of warm-up (a verdict "
        f"needs at least {MIN_VERDICT_BATCHES}, as chute's engine does). Measure more batches: fewer --warmup, "
        "a smaller batch size, or a larger dataset"
    )
    return Verdict("unknown", "", "", headline, evidence, [])


def _remote_verdict(d: Findings, evidence: list[str], lo: float, hi: float) -> Verdict:
    """A chute.ray.RemoteLoader: its batches are made by actors elsewhere, so the layers are the actors and
    the object-store transfer (``d.remote``), not this machine's storage and threads; its changes are
    :func:`advice.remote`'s."""
    run, r = d.run, d.remote
    evidence.append(f"remote: {r.summary()}")
    if r.resubmitted:
        evidence.append(f"remote: {r.resubmitted} batches were sent again after their actor died")
    if run.with_step and hi < INPUT_BOUND_STALL:
        headline = (
            f"consumer-bound: no input problem. The step waited for data {100 * run.stall_fraction:.0f}% of its "
            f"time ({run.median_fetch_ms:.1f} ms per batch against {run.median_step_ms:.1f} ms of step); the "
            f"{r.actors} remote actor{'s' if r.actors != 1 else ''} keep up, more would not help"
        )
        return Verdict("consumer", "consumer", "step", headline, evidence, [])
    stage = r.stage
    what = {
        "actors": f"the remote actors' time ({r.actor_wall_ms:.1f} ms per batch, {r.actors} in parallel)",
        "transfer": f"the object-store transfer to the trainer ({r.transfer_ms:.1f} ms per batch)",
    }[stage]
    if run.with_step and lo < INPUT_BOUND_STALL:
        bound = "borderline"
        headline = (
            f"borderline: the step waited {100 * run.stall_fraction:.0f}% of its time for data (95% interval "
            f"{100 * lo:.0f}-{100 * hi:.0f}% over {len(run.measured)} batches) around the "
            f"{100 * INPUT_BOUND_STALL:.0f}% line; where the input falls short, {what} limits it"
        )
    elif run.with_step:
        bound = "input"
        headline = f"input-bound: the step waits {100 * run.stall_fraction:.0f}% of its time; {what} limits it"
    else:
        bound = "loader"
        headline = f"the RemoteLoader alone delivers {_fmt_rate(run.rate)} samples/s; {what} limits it"
    return Verdict(bound, "remote", stage, headline, evidence, advice.remote(r))


def _cpu_evidence(d: Findings, evidence: list[str]) -> None:
    c, info = d.cpu, d.dataloader
    if c is None:
        return
    if info is not None and info.fast_path:
        s = d.run.loader_stats or {}
        evidence.append(
            f"chute.DataLoader took its native fast path ({info.path}): no worker processes run "
            f"(num_workers={info.num_workers} asked); chute's engine used {s.get('active_threads', 0)} "
            f"of {s.get('threads', 0)} threads"
        )
    elif info is not None and info.num_workers > 0:
        evidence.append(
            f"{info.num_workers} DataLoader worker{'s' if info.num_workers > 1 else ''} used "
            f"{c.mean_children_cores:.2f} cores "
            f"({100 * c.mean_children_cores / info.num_workers:.0f}% of their time on CPU"
            + (
                f", {100 * c.mean_children_waiting / info.num_workers:.0f}% waiting for a core)"
                if c.mean_children_waiting is not None
                else ")"
            )
        )
    elif info is not None:
        evidence.append(
            f"num_workers=0: the main process loads every batch itself; its main thread used "
            f"{100 * c.mean_main_thread:.0f}% of a core"
        )
    evidence.append(
        f"CPU: {c.total_cores_used:.2f} of {c.cores} cores busy on average (this process "
        f"{c.mean_process_cores:.2f}, worker processes {c.mean_children_cores:.2f}); torch intra-op "
        f"threads {c.torch_threads}"
        + ("; the process spans NUMA nodes " + ", ".join(str(n) for n in c.numa) if c.spans_numa_nodes else "")
    )
    if c.machine_busy:
        evidence.append(
            f"the machine is shared: load average {c.load_average:.1f} on {c.cores} cores while this job "
            f"used {c.total_cores_used:.2f}; every rate here is lower than on an idle machine"
        )


def _storage_evidence(d: Findings, evidence: list[str]) -> None:
    st = d.storage
    if st is None:
        return
    where = f"{st.mount.fs_type} at {st.mount.mount_point}" if st.mount else "an unknown filesystem"
    evidence.append(
        f"storage: {st.files:,} files ({st.dataset_bytes / 1e6:,.1f} MB) on {where}"
        + (" (a network filesystem)" if st.mount and st.mount.network else "")
        + f"; listing {st.directories:,} director{'y' if st.directories == 1 else 'ies'} ({st.scan_entries:,} entries) took {st.scan_s:.2f} s; "
        f"reads cold {st.cold.mb_per_s:,.0f} MB/s ({st.cold.files_per_s:,.0f} files/s, median "
        f"{st.cold.median_ms:.2f} ms), hot {st.hot.mb_per_s:,.0f} MB/s"
    )
    need = d.run.rate * st.mean_file_bytes / 1e6
    if need > 0:
        evidence.append(
            f"the loader's {_fmt_rate(d.run.rate)} samples/s need {need:,.1f} MB/s of reads; one thread "
            f"reads {st.cold_rate_for(d.run.rate):,.1f}x that cold"
        )
    for directory, n in st.huge_directories[:3]:
        evidence.append(f"huge directory: {directory} holds {n:,} entries")
