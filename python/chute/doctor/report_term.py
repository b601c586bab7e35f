"""The terminal summary of a diagnosis, with rich: the verdict first, then the layers' tables, rendered
from the model (``findings.py``)."""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from chute.doctor.findings import WORTH_IT, Findings


def _throughput(d: Findings) -> Table:
    t = Table(title="throughput (measured, same steps)", title_justify="left")
    t.caption = "fetch and step: median ms per batch; start-up: iter() to the first batch"
    for col in ("loader", "samples/s", "vs yours", "stall", "fetch", "step", "start-up"):
        t.add_column(col, justify="left" if col == "loader" else "right", no_wrap=col != "loader")
    base = d.run.rate
    for i, run in enumerate([d.run, *d.comparisons]):
        t.add_row(
            run.label + (" (yours)" if i == 0 else ""),
            f"{run.rate:,.0f}",
            f"{run.rate / base:.2f}x" if base > 0 else "",
            f"{100 * run.stall_fraction:.0f}%",
            f"{run.median_fetch_ms:.1f}",
            f"{run.median_step_ms:.1f}" if run.with_step else "-",
            f"{run.first_batch_s:.2f} s",
            style="bold" if i == 0 else None,
        )
    return t


def _settings(d: Findings) -> Table | None:
    info = d.dataloader
    if info is None:
        return None
    t = Table(title="DataLoader settings", title_justify="left", show_header=False)
    t.add_column("setting")
    t.add_column("value")
    transfers = d.run.transfers
    if transfers:
        blocking = sum(not x.non_blocking for x in transfers)
        nb = f"{len(transfers) - blocking} of {len(transfers)} copies to {transfers[0].target} were non_blocking"
    else:
        nb = "no copy to another device seen in the step" if d.run.with_step else "not seen (no step_fn)"
    batch_mb = d.run.batch_bytes / 1e6
    rows = [
        (
            "num_workers",
            f"{info.num_workers} asked; none run: chute's fast path ({info.path}) decodes on its own threads"
            if info.fast_path
            else f"{info.num_workers} (start method: {info.start_method})",
        ),
        ("per-batch fetch", f"median {d.run.median_fetch_ms:.1f} ms, batch of {batch_mb:,.1f} MB"),
        ("pin_memory", str(info.pin_memory)),
        ("persistent_workers", str(info.persistent_workers)),
        ("non_blocking", nb),
        (
            "prefetch_factor x num_workers",
            f"{info.prefetch_factor} x {info.num_workers} = {info.in_flight_batches} batches in flight = "
            f"{info.in_flight_bytes(d.run.batch_bytes) / 1e6:,.1f} MB of shared memory"
            + (" (+ as much pinned)" if info.pin_memory else "")
            if info.num_workers_running
            else ("none (the fast path's batches are the engine's)" if info.fast_path else "none (num_workers=0)"),
        ),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


def _stages(d: Findings) -> Table | None:
    ms, shares, where = d.stage_shares()
    if not ms:
        return None
    t = Table(title=f"per-sample time by stage ({where})", title_justify="left")
    for col in ("stage", "ms per sample", "share"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for k, v in ms.items():
        t.add_row(k, f"{v:.3f}", f"{100 * shares[k]:.0f}%")
    return t


def _remote(d: Findings) -> Table | None:
    if d.remote is None:
        return None
    rows = d.remote.rows()
    t = Table(title=f"remote actors (chute.ray.RemoteLoader, over {d.remote.batches} batches)", title_justify="left")
    t.add_column("figure")
    t.add_column("value")
    for k, v in rows:
        t.add_row(k, v)
    return t


def _layers(d: Findings) -> Table:
    t = Table(title="layers", title_justify="left", show_header=False)
    t.add_column("layer")
    t.add_column("finding")
    st = d.storage
    if st is not None:
        where = (
            f"{st.mount.fs_type} at {st.mount.mount_point}" + (" (network)" if st.mount.network else "")
            if st.mount
            else "unknown filesystem"
        )
        t.add_row(
            "storage",
            f"{st.files:,} files, {st.dataset_bytes / 1e6:,.1f} MB on {where}; largest directory "
            f"{st.largest_directory[1]:,} entries; scan {st.scan_s:.3f} s (hot)",
        )
        t.add_row(
            "",
            f"reads: cold {st.cold.mb_per_s:,.1f} MB/s ({st.cold.files_per_s:,.0f} files/s), hot "
            f"{st.hot.mb_per_s:,.1f} MB/s, one thread, {st.cold.files} files",
        )
        t.add_row(
            "",
            f"page cache: dataset {st.dataset_bytes / 1e9:.2f} GB vs {st.mem_available / 1e9:.1f} GB "
            f"available ({'does not fit' if st.exceeds_page_cache else 'fits'})",
        )
        for note in st.notes:
            t.add_row("", note)
    c = d.cpu
    if c is not None:
        numa = ", ".join(f"node {n}: {len(cpus)} CPUs" for n, cpus in c.numa.items()) or "not reported"
        t.add_row(
            "cpu",
            f"{c.total_cores_used:.2f} of {c.cores} cores busy (process {c.mean_process_cores:.2f}, "
            f"main thread {c.mean_main_thread:.2f}, workers {c.mean_children_cores:.2f}); peak "
            f"{c.peak_total_cores:.2f}",
        )
        t.add_row(
            "",
            f"loader threads/workers {c.loader_threads}, torch threads {c.torch_threads}"
            + (" - they compete for cores" if c.oversubscribed else "")
            + f"; NUMA: {numa}",
        )
    dev = d.device
    if dev is not None:
        if not dev.available:
            t.add_row("device", dev.reason)
        else:
            u = dev.util_stats(d.run.measured_start)
            line = f"{dev.name}: " + (
                f"utilisation mean {u['mean']:.0f}%, p10 {u['p10']:.0f}%, p90 {u['p90']:.0f}% "
                f"({len(dev.timeline.t)} samples at {dev.sample_hz:.0f} Hz)"
                if u
                else "no samples"
            )
            if dev.copy is not None:
                line += (
                    f"; copy of a {dev.copy.bytes / 1e6:,.1f} MB batch: {dev.copy.pageable_ms:.2f} ms pageable, "
                    f"{dev.copy.pinned_ms:.2f} ms pinned"
                )
            t.add_row("device", line)
    return t


def _parts(d: Findings) -> list:
    v = d.verdict
    parts: list = [Text(f"chute doctor: {d.target}", style="bold")]
    if v is not None:
        body = Text()
        body.append(v.headline + "\n", style="bold")
        for e in v.evidence:
            body.append(f"  - {e}\n")
        if v.recommendations:
            body.append("changes, by expected gain:\n", style="bold")
            for i, r in enumerate(v.recommendations, 1):
                kind = "measured" if r.measured else "estimate, at most"
                body.append(f"  {i}. {r.action}: ", style="bold")
                body.append(f"{r.gain:.1f}x ({kind}; {r.basis})\n")
        elif v.layer == "consumer":
            body.append("no change to the input pipeline is called for\n")
        else:
            body.append(f"no change found that gains {100 * (WORTH_IT - 1):.0f}% or more\n")
        parts.append(Panel(body, title=f"verdict: {v.layer}", title_align="left"))
    parts.append(_throughput(d))
    for table in (_settings(d), _remote(d), _stages(d), _layers(d)):
        if table is not None:
            parts.append(table)
    for note in d.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return parts


def render(d: Findings, console: Console | None = None) -> None:
    (console or Console()).print(Group(*_parts(d)))


def render_text(d: Findings, width: int = 110) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, no_color=True, color_system=None).print(Group(*_parts(d)))
    return buf.getvalue()
