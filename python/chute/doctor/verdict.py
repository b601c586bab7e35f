"""The verdict: which layer limits the job, the evidence, and changes ranked by expected gain.

Every figure comes from the :class:`~chute.doctor.report.Diagnosis`'s measurements. A recommendation's
gain is the expected speed-up of the samples per second the step receives; ``measured`` says whether it
comes from a run the doctor made (chute, more workers) or from a model of measured parts (Amdahl's law
over the per-sample stage times, for instance), which is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chute import _native
from chute.doctor.cpu import worker_figures

if TYPE_CHECKING:
    from chute.doctor.report import Diagnosis

# The thresholds are the engine's (chute/stats.h): the doctor's verdict and loader.stats() come from the one
# verdict engine, chute::diagnose, so they cannot disagree.
INPUT_BOUND_STALL = _native.INPUT_BOUND_STALL  # the step waits at least this share of its time: input-bound
WORTH_IT = 1.10  # recommend a change only when it gains at least 10%
# The engine's limit -> the doctor's (layer, stage).
_LAYER = {
    "storage": ("storage", "read"),
    "decode": ("cpu", "decode"),
    "transform": ("cpu", "transform"),
    "prefetch": ("cpu", "prefetch"),
    "cores": ("cpu", "cores"),
}


@dataclass
class Recommendation:
    action: str
    gain: float  # expected speed-up (x) of what the step receives
    basis: str  # the numbers behind it
    measured: bool  # a measured run, or an estimate from measured parts

    def __str__(self) -> str:
        kind = "measured" if self.measured else "estimated, at most"
        return f"{self.action}: {self.gain:.1f}x {kind} ({self.basis})"


@dataclass
class Verdict:
    bound: str  # "input", "consumer", "borderline" (the stall's interval straddles the threshold) or
    # "loader" (measured alone, without a step)
    layer: str  # "storage", "cpu", "remote" (a chute.ray.RemoteLoader's actors) or "consumer"
    stage: str  # the stage within the layer: read, decode, transform, prefetch, cores, actors, transfer, step
    headline: str
    evidence: list[str] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)


def _stage_shares(d: Diagnosis) -> tuple[dict[str, float], dict[str, float], str]:
    """Per-sample worker time by stage (ms) and its shares, and where it was measured."""
    s = d.run.loader_stats
    if s is not None and s.get("samples"):
        n = s["samples"]
        ms = {"read": 1e3 * s["read_s"] / n, "decode": 1e3 * s["decode_s"] / n, "transform": 1e3 * s["transform_s"] / n}
        where = "chute's stage timers"
    elif d.profile is not None:
        ms = {c: d.profile.ms_per_sample(c) for c in ("read", "decode", "transform", "other")}
        where = f"profile of dataset[i] over {d.profile.samples} samples in this process"
    else:
        return {}, {}, ""
    total = sum(ms.values())
    return ms, {k: v / total if total > 0 else 0.0 for k, v in ms.items()}, where


def engine_verdict(d: Diagnosis) -> dict:
    """chute's verdict (``bound``, ``limit``, ``stage``, ``verdict``) on the measured run: the loader's own
    for a loader on chute's engine, else the same engine (``chute._native.diagnose``) on the figures measured
    here: the per-sample stage times of the profile, the run's wait and step time, and /proc's CPU."""
    s = d.run.loader_stats
    if s is not None and s.get("bound"):
        return s
    run, c, info = d.run, d.cpu, d.dataloader
    ms, _, _ = _stage_shares(d)
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


def decide(d: Diagnosis) -> Verdict:
    run = d.run
    stall = run.stall_fraction
    ms, shares, where = _stage_shares(d)
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
    if d.remote is not None:
        return _remote_verdict(d, evidence, lo, hi)
    engine = engine_verdict(d)
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
        return Verdict("consumer", "consumer", "step", headline, evidence, _rank(recs))

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

    _comparison_recs(d, recs)
    shares = _stage_shares(d)[1]
    if layer == "storage" or (
        st is not None and (st.huge_directories or (st.exceeds_page_cache and st.cold_rate_for(run.rate) < 1.0))
    ):
        _storage_recs(d, recs, shares.get("read", 0.0), ms)
    _cpu_recs(d, recs, layer, stage)
    _device_recs(d, recs)
    return Verdict(bound, layer, stage, headline, evidence, _rank(recs))


def _remote_verdict(d: Diagnosis, evidence: list[str], lo: float, hi: float) -> Verdict:
    """A chute.ray.RemoteLoader: its batches are made by actors elsewhere, so the layers are the actors and
    the object-store transfer (``d.remote``), not this machine's storage and threads. "Add actors" is an
    estimate from RemoteLoader's own model (docs/SCALE.md), never a trial: starting actors is the user's
    cluster's business."""
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
    recs: list[Recommendation] = []
    if stage == "actors" and r.actors_needed is not None and r.actors_needed > r.actors:
        recs.append(
            Recommendation(
                f"add actors: num_actors={r.actors_needed} (now {r.actors}; "
                f"{r.actors_needed * r.cpus_per_actor:g} CPUs in the cluster at num_cpus_per_actor="
                f"{r.cpus_per_actor:g}), max_inflight at least {r.actors_needed}",
                r.actor_gain,
                r.model(),
                False,
            )
        )
    elif stage == "transfer":
        now = r.wait_ms + r.consumer_ms
        recs.append(
            Recommendation(
                "make the transfer cheaper: actors on the trainer's node (the object store maps a batch there "
                "rather than sending it), or fewer bytes per batch (uint8 with device=, normalised on the GPU)",
                now / max(now - r.transfer_ms, 1e-6),
                f"model: the transfer's {r.transfer_ms:.1f} ms removed from {now:.1f} ms per batch",
                False,
            )
        )
    return Verdict(bound, "remote", stage, headline, evidence, _rank(recs))


def _rank(recs: list[Recommendation]) -> list[Recommendation]:
    return sorted((r for r in recs if r.gain >= WORTH_IT), key=lambda r: (-r.gain, not r.measured))


def _cpu_evidence(d: Diagnosis, evidence: list[str]) -> None:
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


def _storage_evidence(d: Diagnosis, evidence: list[str]) -> None:
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


def _comparison_recs(d: Diagnosis, recs: list[Recommendation]) -> None:
    base = d.run.rate
    for other in d.comparisons:
        if base <= 0 or other.rate <= 0:
            continue
        gain = other.rate / base
        if other.label.startswith("chute"):
            action = "switch to chute (chute.Loader over the same ImageFolder and transforms)"
        elif other.label.startswith("torch DataLoader"):
            action = f"use torch's DataLoader ({other.label.removeprefix('torch DataLoader ')}) instead"
        elif other.label.startswith("DataLoader num_workers="):
            action = f"set {other.label.removeprefix('DataLoader ')}"
        else:
            action = other.label
        recs.append(
            Recommendation(
                action,
                gain,
                f"{_fmt_rate(other.rate)} vs {_fmt_rate(base)} samples/s measured over {len(other.measured)} batches",
                True,
            )
        )


def _storage_recs(d: Diagnosis, recs: list[Recommendation], share: float, ms: dict[str, float]) -> None:
    st = d.storage
    parts = []
    if ms:
        parts.append(f"reads take {ms['read']:.2f} ms of {sum(ms.values()):.2f} ms per sample")
    if st is not None:
        parts.append(f"the scan costs {st.scan_s:.2f} s over {st.scan_entries:,} entries")
        if st.huge_directories:
            parts.append(f"{st.huge_directories[0][1]:,} files in one directory")
        parts.append(f"cold reads {st.cold.mb_per_s:,.0f} MB/s, {st.cold.median_ms:.2f} ms per file")
        if st.mount is not None and st.mount.network:
            parts.append(f"on {st.mount.fs_type}")
    gain = 1 / max(1 - share, 0.02) if share else 1.0
    if st is not None and not share and st.huge_directories:
        gain = WORTH_IT  # start-up only; no per-sample figure to base a larger gain on
    recs.append(
        Recommendation(
            "pack the dataset into a few large files with an index (or copy it to local disk)",
            gain,
            "; ".join(parts),
            False,
        )
    )


def _cpu_recs(d: Diagnosis, recs: list[Recommendation], layer: str, stage: str) -> None:
    run, info, c = d.run, d.dataloader, d.cpu
    s = run.loader_stats
    if s is not None and layer == "cpu" and c is not None:
        threads, active = s["threads"], s["active_threads"]
        if active < c.cores and (threads < c.cores or not s.get("auto_threads")):
            busy = (
                (s["read_s"] + s["decode_s"] + s["transform_s"]) / max(run.wait_s + run.step_s, 1e-9) / max(active, 1)
            )
            recs.append(
                Recommendation(
                    f"raise threads to {c.cores} (num_threads or max_threads)",
                    c.cores / active,
                    f"{active} threads busy {100 * min(busy, 1):.0f}% of the time; {c.cores} cores allowed",
                    False,
                )
            )
        if stage == "prefetch":
            idle = s["worker_idle_s"] / max(s["worker_idle_s"] + s["read_s"] + s["decode_s"] + s["transform_s"], 1e-9)
            # The window the step needed: what it had, plus the most batches in a row it waited for (a burst
            # of quick steps that emptied the window; with them ready ahead, none would have waited).
            streak = longest_wait_streak(run)
            target = s["prefetch"] + max(streak, 1)
            if s.get("auto_prefetch"):
                action = f"raise max_memory (auto prefetch is at the {s.get('max_prefetch', s['prefetch'])} batches it allows)"
            elif info is not None and info.fast_path:  # the DataLoader's own knob: prefetch_factor * num_workers
                factor, workers = info.prefetch_factor or 1, max(info.num_workers, 1)
                action = (
                    f"raise prefetch_factor to {max(-(-target // workers), factor + 1)} (it is {factor}, so "
                    f"{s['prefetch']} batch{'' if s['prefetch'] == 1 else 'es'} ahead for num_workers={workers}; "
                    f"or leave it unset for automatic prefetch)"
                )
            else:
                action = f"raise prefetch to {target} (it is {s['prefetch']}; or 'auto')"
            recs.append(_prefetch_rec(action, run, c, target, streak, f"idled {100 * idle:.0f}%"))
    if s is None and stage == "prefetch" and info is not None and info.num_workers > 0 and c is not None:
        # torch's DataLoader: prefetch_factor batches ahead per worker (2 when unset)
        streak = longest_wait_streak(run)
        factor, workers = info.prefetch_factor or 2, info.num_workers
        target = factor * workers + max(streak, 1)
        idle = max(workers - c.mean_children_cores - (c.mean_children_waiting or 0.0), 0.0) / workers
        action = (
            f"raise prefetch_factor to {max(-(-target // workers), factor + 1)} (it is {factor}, so "
            f"{factor * workers} batches ahead for num_workers={workers})"
        )
        recs.append(_prefetch_rec(action, run, c, target, streak, f"slept {100 * idle:.0f}%"))
    if info is not None and info.num_workers_running > 0 and not info.persistent_workers:
        per_batch = (run.wait_s + run.step_s) / max(len(run.measured), 1)
        startup = max(run.first_batch_s - run.median_fetch_ms / 1e3, 0.0)
        epoch = per_batch * d.batches_per_epoch if d.batches_per_epoch else 0.0
        if epoch > 0:
            recs.append(
                Recommendation(
                    "set persistent_workers=True",
                    (epoch + startup) / epoch,
                    f"workers start again every epoch: {startup:.2f} s to the first batch against "
                    f"{epoch:.1f} s per epoch",
                    False,
                )
            )
    # Fewer loader threads or torch threads for an input-bound job is advised only from a measured trial
    # (a comparison run by chute.doctor: "torch.set_num_threads(1) in the step"), never from a model.


def _prefetch_rec(action: str, run, c, target: int, streak: int, idle: str) -> Recommendation:
    """A larger prefetch window, estimated: the step's whole wait removed with ``target`` batches ahead."""
    return Recommendation(
        action,
        1 / max(1 - run.stall_fraction, 0.05),
        f"model: the step's whole wait ({100 * run.stall_fraction:.0f}% of its time) removed with {target} "
        f"batches ahead, since it waited for up to {streak} batches in a row; the workers {idle} of their "
        f"time with {c.cores - c.total_cores_used:.2f} cores to spare",
        False,
    )


def longest_wait_streak(run) -> int:
    """The most measured batches in a row that the step waited for: a wait over a tenth of the mean time
    per batch (wait and step). A bursty step empties the prefetch window and then waits batch after batch;
    that many more batches ahead would have been ready."""
    steps = run.measured
    if not steps:
        return 0
    mean = sum(st.wait_s + st.step_s for st in steps) / len(steps)
    streak = best = 0
    for st in steps:
        streak = streak + 1 if st.wait_s > 0.1 * mean else 0
        best = max(best, streak)
    return best


def _device_recs(d: Diagnosis, recs: list[Recommendation]) -> None:
    dev, run = d.device, d.run
    if dev is None or not dev.available or dev.copy is None:
        return
    per_batch_ms = 1e3 * (run.wait_s + run.step_s) / max(len(run.measured), 1)
    cp = dev.copy
    if d.dataloader is not None and not d.dataloader.pin_memory and cp.pageable_ms > cp.pinned_ms:
        recs.append(
            Recommendation(
                "set pin_memory=True",
                per_batch_ms / max(per_batch_ms - (cp.pageable_ms - cp.pinned_ms), 1e-3),
                f"a batch copies in {cp.pageable_ms:.2f} ms pageable vs {cp.pinned_ms:.2f} ms pinned",
                False,
            )
        )
    if run.transfers and not any(t.non_blocking for t in run.transfers):
        recs.append(
            Recommendation(
                "copy with .to(device, non_blocking=True) from pinned memory",
                per_batch_ms / max(per_batch_ms - cp.pinned_ms, 1e-3),
                f"{len(run.transfers)} blocking copies seen; {cp.pinned_ms:.2f} ms per batch could overlap",
                False,
            )
        )
    if cp.bytes and run.batch_bytes and run.dtype == "float32":
        saved = cp.pinned_ms * 3 / 4
        recs.append(
            Recommendation(
                "move normalisation to the GPU (uint8 across PCIe, normalise on the device)",
                per_batch_ms / max(per_batch_ms - saved, 1e-3),
                f"float32 batches copy in {cp.pinned_ms:.2f} ms; uint8 is a quarter of the bytes",
                False,
            )
        )
