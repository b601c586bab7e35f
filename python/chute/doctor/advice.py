"""The changes the verdict recommends, each with its expected gain and the numbers behind it.

A gain is the expected speed-up of the samples per second the step receives. ``measured`` says whether it
comes from a run the doctor made (chute, more workers, fewer torch threads) or from a model of measured
parts (Amdahl's law over the per-sample stage times, for instance), which is an upper bound. Each function
appends the changes of one layer; :func:`rank` keeps those that gain at least ``WORTH_IT``, best first.
"""

from __future__ import annotations

from chute.doctor.compare import DROPIN_LABEL
from chute.doctor.findings import MIN_VERDICT_BATCHES, WORTH_IT, Findings, Recommendation
from chute.doctor.remote import RemoteReport


def rank(recs: list[Recommendation]) -> list[Recommendation]:
    """The changes worth making (a gain of ``WORTH_IT`` or more), largest gain first, measured before estimated."""
    return sorted((r for r in recs if r.gain >= WORTH_IT), key=lambda r: (-r.gain, not r.measured))


def remote(r: RemoteReport) -> list[Recommendation]:
    """A chute.ray.RemoteLoader's changes, ranked: more actors (RemoteLoader's own model, docs/SCALE.md, never
    a trial: starting actors is the user's cluster's business) or a cheaper object-store transfer."""
    recs: list[Recommendation] = []
    if r.stage == "actors" and r.actors_needed is not None and r.actors_needed > r.actors:
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
    elif r.stage == "transfer":
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
    return rank(recs)


def comparisons(d: Findings, recs: list[Recommendation]) -> None:
    """Each loader measured beside the user's (the drop-in, chute, more workers, torch's own DataLoader, fewer
    torch threads): its measured gain; for a loader measured alone beside a job measured with its step (the
    drop-in while watching a script), an estimate from both."""
    base = d.run.rate
    for other in d.comparisons:
        if base <= 0 or other.rate <= 0 or len(other.measured) < MIN_VERDICT_BATCHES:
            continue
        if other.with_step != d.run.with_step:
            recs.append(_alone_beside_a_job(d.run, other))
            continue
        gain = other.rate / base
        if other.label.startswith(DROPIN_LABEL):
            action = _dropin_action(other.label)
        elif other.label.startswith("chute"):
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
                f"{other.rate:,.0f} vs {base:,.0f} samples/s measured over {len(other.measured)} batches",
                True,
            )
        )


def _dropin_action(label: str) -> str:
    path = label.removeprefix(DROPIN_LABEL).strip(" ()")
    return (
        "change one import: from chute import DataLoader (the same arguments; chute.DataLoader runs this "
        f"pipeline on its native fast path, {path})"
    )


def _alone_beside_a_job(job, alone) -> Recommendation:
    """The job's gain from a loader measured alone (no step) while the job ran with its step: the time per
    batch becomes at most the longer of the step and the loader's own time per batch (prefetch overlaps them),
    an upper bound that assumes the step keeps its cores."""
    n, m = max(len(job.measured), 1), max(len(alone.measured), 1)
    now = (job.wait_s + job.step_s) / n
    step, fetch = job.step_s / n, alone.wait_s / m
    action = _dropin_action(alone.label) if alone.label.startswith(DROPIN_LABEL) else alone.label
    return Recommendation(
        action,
        now / max(step, fetch, 1e-9),
        f"measured alone at {alone.rate:,.0f} samples/s ({1e3 * fetch:.1f} ms per batch, {m} batches) against "
        f"{1e3 * now:.1f} ms per batch in the job ({1e3 * step:.1f} ms of it the step)",
        False,
    )


def storage(d: Findings, recs: list[Recommendation], share: float, ms: dict[str, float]) -> None:
    """Packing the dataset: the reads' ``share`` of the worker time removed (Amdahl), an estimate."""
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


def cpu(d: Findings, recs: list[Recommendation], layer: str, stage: str) -> None:
    """More threads, a larger prefetch window (chute's knob or torch's prefetch_factor), persistent workers:
    estimates from the measured figures."""
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
            recs.append(_prefetch(action, run, c, target, streak, f"idled {100 * idle:.0f}%"))
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
        recs.append(_prefetch(action, run, c, target, streak, f"slept {100 * idle:.0f}%"))
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


def _prefetch(action: str, run, c, target: int, streak: int, idle: str) -> Recommendation:
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


def device(d: Findings, recs: list[Recommendation]) -> None:
    """Pinned memory, non-blocking copies, uint8 across PCIe: estimates from the timed batch copy."""
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
