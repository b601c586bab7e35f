"""``chute bench --sweep`` and ``--sweep-storage``: their runs and tables (chute.bench.sweep and
chute.bench.storage do the work)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from chute.cli.terminal import progress_bar


def sweep(args: argparse.Namespace, root: Path, console) -> int:
    import warnings

    from rich.table import Table

    from chute.bench.harness import Summary
    from chute.bench.run import available_cores
    from chute.bench.sweep import grid, plot, run_sweep

    families = ("chute",) if args.chute_only else ("dataloader", "chute")
    steps = len([c for c in grid(available_cores()) if c.family in families]) * (1 + args.rounds) + 2 * (
        1 + args.rounds
    )
    with progress_bar(console) as progress, warnings.catch_warnings():
        # pin_memory=True on a machine without an accelerator: torch warns once per epoch that it pins nothing.
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        # 2 x cores workers is part of the grid on purpose: torch warns that it exceeds the core count.
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        task = progress.add_task("sweep", total=steps, rate="")

        def on_step(step: str) -> None:
            progress.update(task, description=f"sweep: {step}")
            progress.advance(task)

        result = run_sweep(
            root,
            pipeline=args.pipeline,
            batch_size=args.batch_size,
            rounds=args.rounds,
            consumer_ms=args.consumer_ms,
            families=families,
            on_step=on_step,
        )
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result.to_json() | {"root": str(root)}, indent=2))
        return 0
    title = (
        f"chute bench --sweep: {result.pipeline} pipeline, {result.images} images, batch {result.batch_size}, "
        f"{result.cores} cores, median of {args.rounds} epochs"
    )
    if result.consumer_ms:
        title += f", consumer step {result.consumer_ms:g} ms"
    table = Table(title=title)
    for column in ("loader", "workers", "pin_memory", "prefetch", "img/s", "range", "CPU ms/img", "threads at end"):
        table.add_column(column, justify="left" if column == "loader" else "right")
    for c in result.configs:
        cpu = f"{Summary.of(c.cpu_per_image_ms).median:.2f}" if c.cpu_per_image_ms else ""
        style = "bold green" if c.workers == "auto" else None
        table.add_row(
            "DataLoader" if c.family == "dataloader" else "chute",
            str(c.workers),
            "" if c.pin_memory is None else str(c.pin_memory),
            "" if c.prefetch is None else str(c.prefetch),
            f"{c.rate:,.0f}",
            c.summary.range_text(",.0f"),
            cpu,
            "" if c.active_threads is None else str(c.active_threads),
            style=style,
        )
    console.print(table)
    h = result.head_to_head
    knees = "; ".join(
        f"{'DataLoader' if f == 'dataloader' else 'chute'} {result.knee(f)} "
        f"{'workers' if f == 'dataloader' else 'threads'} (best {result.best(f).name}, "
        f"{result.best(f).rate:,.0f} img/s)"
        for f in result.families()
    )
    console.print(f"knee (fewest workers within 95% of the family's best): {knees}.")
    console.print(
        f"head to head, interleaved: chute auto {h['auto']:,.0f} img/s ({h['auto_active_threads']} threads working at "
        f"the end, {h['auto_cpu_ms_per_image']:.2f} CPU ms/img) vs best manual {h['manual_config']} "
        f"{h['manual']:,.0f} img/s ({h['manual_cpu_ms_per_image']:.2f} CPU ms/img): auto reaches "
        f"[bold]{100 * result.auto_ratio():.0f}%[/bold] of it."
    )
    console.print(
        f"dataset: {root}. CPU ms/img: this process's CPU time per image (chute's threads; the "
        "DataLoader's workers are other processes). pin_memory pins only where an accelerator is present."
    )
    if args.plot:
        console.print(f"plot: {args.plot}")
    return 0


def sweep_storage(args: argparse.Namespace, root: Path, console) -> int:
    from rich.table import Table

    from chute.bench.storage import plot, run_storage_sweep

    with console.status("sweep-storage") as status:
        result = run_storage_sweep(
            root,
            pipeline=args.pipeline,
            batch_size=args.batch_size,
            rounds=args.rounds,
            threads=args.threads,
            reducing_gap=args.reducing_gap,
            images=args.images,
            ffcv_python=args.ffcv_python,
            on_step=lambda step: status.update(f"sweep-storage: {step}"),
        )
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    table = Table(
        title=f"chute bench --sweep-storage: {result.images} images, {result.pipeline} pipeline "
        f"(uint8), batch {result.batch_size}, {result.threads} threads, median of "
        f"{result.rounds} epochs, hot cache"
    )
    for column in ("source", "MB on disk", "img/s", "per core", "vs originals", "MAE", "p99", "max", "changed"):
        table.add_column(column, justify="left" if column == "source" else "right")
    base = result.rows[0].per_core
    for row in result.rows:
        if row.unavailable is not None:
            table.add_row(row.name, "unavailable", "", "", "", "", "", "", "", style="dim")
            continue
        e = row.error
        table.add_row(
            row.name,
            f"{row.bytes / 1e6:,.1f}",
            f"{row.rate:,.0f}",
            f"{row.per_core:,.0f}",
            f"{row.per_core / base:.2f}x",
            f"{e.mae:.3f}",
            str(e.p99),
            str(e.max),
            f"{e.changed}/{e.images}",
        )
    console.print(table)
    for row in result.rows:
        if row.unavailable is not None:
            console.print(f"{row.name}: unavailable: {row.unavailable}")
        elif row.note:
            console.print(f"{row.name}: {row.note}")
    console.print(
        f"dataset: {root}. per core: images per CPU-second of the loading process (its threads' CPU "
        "time; holds when other work shares the cores). vs originals: ratio of that. Pixel error: "
        "|row - exact decoding of the originals| per channel value, through Resize(256) + "
        "CenterCrop(224) (deterministic), uint8, sample by sample; changed: images not bit-identical."
    )
    if args.plot:
        console.print(f"plot: {args.plot}")
    elif not _have_matplotlib():
        console.print("no plot: matplotlib is not installed (pip install 'chute[plot]', then --plot PNG)")
    return 0


def _have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
