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
    local = result.rate("chute, local shards")
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    from rich.table import Table

    table = Table(
        title=f"{result.images:,} images in {result.shards} shards of {result.shard_bytes / 1e6:.1f} MB, "
        f"over HTTP with {result.latency_ms:g} ms added per request (train pipeline, median of {args.rounds})"
    )
    for column in ("reader", "img/s", "range", "vs chute local", "img per CPU-s"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    for row in result.rows:
        s, per_core = row.summary, result.per_core(row)
        table.add_row(
            row.name,
            f"{s.median:,.0f}",
            f"{s.low:,.0f}-{s.high:,.0f}",
            f"{row.rate / local:.2f}x",
            "-" if per_core is None else f"{per_core:,.0f}",
        )
    console.print(table)
    if result.first_batch_s:
        first = sorted(result.first_batch_s)
        console.print(
            f"cold cache: first batch {first[len(first) // 2]:.2f} s after chute.open (median; "
            f"{first[0]:.2f}-{first[-1]:.2f} s)"
        )
    if result.io:
        io = result.io
        console.print(
            f"remote I/O (this process, every cold epoch): {io['requests']:,} requests, {io['bytes'] / 1e6:,.0f} MB, "
            f"{io['retries']} retries, latency p50 {1e3 * io['latency_p50_s']:.0f} ms, "
            f"p99 {1e3 * io['latency_p99_s']:.0f} ms; {io['reader_waits']} reads waited "
            f"{io['reader_wait_s']:.2f} s for a shard"
        )
    if result.io_threads_cpu_s:

        def median(values: list[float]) -> float:
            return sorted(values)[len(values) // 2]

        local_cpu = [t.cpu_seconds for t in result.rows[0].timings if t.cpu_seconds is not None]
        console.print(
            "CPU beside the decode, per cold epoch (median, same cores): chute's I/O threads "
            f"{median(result.io_threads_cpu_s):.2f} s, the servers (nginx, latency relay) "
            f"{median(result.servers_cpu_s):.2f} s, the kernel writing the cache back "
            f"{median(result.writeback_cpu_s):.2f} s (after the epoch, untimed; machine-wide)"
            + (f"; a local epoch: {median(local_cpu):.2f} s" if local_cpu else "")
        )
    for note in result.notes:
        console.print(note)
    return 0
