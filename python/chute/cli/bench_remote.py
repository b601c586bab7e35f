"""``chute bench --remote``: its run and table (chute.bench.remote does the work)."""

from __future__ import annotations

import json
import os


def nginx_missing(console) -> bool:
    """Whether the nginx that serves the dataset (chute.bench.loopback) is missing; if so, says so in one line."""
    from chute.bench import loopback

    if os.access(loopback.NGINX, os.X_OK):
        return False
    console.print(
        f"chute bench --remote: serves the dataset with nginx, which is not installed ({loopback.NGINX}): "
        "apt-get install nginx-light",
        markup=False,
        soft_wrap=True,
    )
    return True


def remote(args, root, console) -> int:
    from chute.bench.remote import run_remote_bench

    with console.status("benchmarking") as status:
        result = run_remote_bench(
            root,
            latency_ms=args.latency_ms,
            rounds=args.rounds,
            batch_size=args.batch_size,
            threads=args.threads,
            on_step=lambda step: status.update(f"benchmarking: {step}"),
        )
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    from rich.table import Table

    table = Table(
        title=f"{result.images:,} images in {result.shards} shards of {result.shard_bytes / 1e6:.1f} MB (and as "
        f"WebDataset tars), over HTTP with {result.latency_ms:g} ms added per request (train pipeline, median "
        f"of {args.rounds})"
    )
    for column in ("reader", "img/s", "range", "vs chute local", "img per CPU-s"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    for row in result.rows:
        s, per_core = row.summary, result.per_core(row)
        table.add_row(
            row.name,
            f"{s.median:,.0f}",
            f"{s.low:,.0f}-{s.high:,.0f}",
            f"{row.rate / result.local_of(row):.2f}x",
            "-" if per_core is None else f"{per_core:,.0f}",
        )
    console.print(table)

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    for kind, firsts in result.first_batch_s.items():
        fetched = result.first_batch_fetched[kind]
        cpu = result.thread_cpu_s[kind]
        by_thread = ", ".join(f"{name} {median([c.get(name, 0.0) for c in cpu]):.2f}" for name in sorted(cpu[-1]))
        console.print(
            f"remote {kind}, cold: first batch {median(firsts):.2f} s after chute.open (median; "
            f"{min(firsts):.2f}-{max(firsts):.2f} s), {100 * median(fetched):.0f}% of the dataset "
            f"({result.dataset_bytes[kind.split(',')[0]] / 1e6:,.0f} MB) received by then; same batches as local: "
            f"{'yes' if result.same_batches.get(kind.split(',')[0]) else 'NO'}. CPU-s per cold epoch by thread: {by_thread}; "
            f"the servers (nginx, latency relay) {median(result.servers_cpu_s[kind]):.2f}, the kernel's writeback "
            f"after it {median(result.writeback_cpu_s[kind]):.2f} (untimed, machine-wide)",
            soft_wrap=True,
        )
    if result.io:
        io = result.io
        console.print(
            f"remote I/O (shards, the last cold epoch): {io['requests']:,} requests, {io['bytes'] / 1e6:,.0f} MB, "
            f"{io['retries']} retries, latency p50 {1e3 * io['latency_p50_s']:.0f} ms, "
            f"p99 {1e3 * io['latency_p99_s']:.0f} ms; {io['reader_waits']} reads waited "
            f"{io['reader_wait_s']:.2f} s for a shard; shards in memory: {io['buffers']} buffers, at most "
            f"{io['memory_limit'] / 1e6:,.0f} MB",
            soft_wrap=True,
        )
    local_cpu = [t.cpu_seconds for t in result.rows[0].timings if t.cpu_seconds is not None]
    if local_cpu:
        console.print(f"a local epoch of shards: {median(local_cpu):.2f} CPU-s (this process)")
    for note in result.notes:
        console.print(note)
    return 0
