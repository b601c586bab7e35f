"""The ``chute`` command line. Subcommands live here only as argument parsing and printing; the work is
done by the library (chute.bench.run for ``bench``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chute import __version__, cache_cli, pack_cli


def _parse_workers(text: str) -> list[int]:
    try:
        workers = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not workers or any(w < 0 for w in workers):
        raise argparse.ArgumentTypeError("worker counts must be >= 0")
    return workers


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chute", description="Keeps GPUs fed: chute's tools.")
    parser.add_argument("--version", action="version", version=f"chute {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench",
        help="benchmark chute against the PyTorch DataLoader",
        description="Runs chute and the PyTorch DataLoader side by side over the same images, on the same "
        "cores, interleaved, and prints img/s and the ratio to the best DataLoader setting. With "
        "no --root, it generates (once) and uses an ImageNet-like dataset of 2000 JPEGs.",
    )
    bench.add_argument("--root", type=Path, help="an ImageFolder directory (default: the generated dataset)")
    bench.add_argument(
        "--pipeline",
        choices=("train", "eval"),
        default="train",
        help="train: RandomResizedCrop(224)+flip+normalise; eval: Resize(256)+CenterCrop(224)+normalise",
    )
    bench.add_argument("--batch-size", type=_positive, default=256)
    bench.add_argument("--rounds", type=_positive, default=3, help="timed epochs per configuration (median)")
    bench.add_argument("--workers", type=_parse_workers, help="DataLoader num_workers to try (default: 0..cores)")
    bench.add_argument("--threads", type=_positive, help="chute threads (default: all cores)")
    bench.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    bench.add_argument(
        "--source",
        help="also run chute on this packed dataset or tar shards (chute.open), "
        "interleaved with the same loader on the ImageFolder --root",
    )
    bench.add_argument(
        "--remote",
        action="store_true",
        help="serve the dataset (packed shards and WebDataset tars) over HTTP on loopback with --latency-ms "
        "added per request, and compare chute reading it remotely (cold and warm cache) with chute on the "
        "local shards and with WebDataset + DataLoader over HTTP, in one run (with no --root, on a generated "
        "dataset of 8,000 JPEGs, so that a cold epoch's downloads run through it)",
    )
    bench.add_argument(
        "--latency-ms", type=_non_negative_float, default=20.0, help="--remote: latency added per request"
    )
    bench.add_argument(
        "--sweep",
        action="store_true",
        help="measure the grid users tune by hand: DataLoader num_workers 0..cores and 2x cores x "
        "pin_memory x prefetch_factor 2/4, chute threads x prefetch 2/4, then chute's auto mode "
        "against the best manual chute setting",
    )
    bench.add_argument(
        "--consumer-ms",
        type=_non_negative_float,
        default=0.0,
        help="--sweep: simulate a training step that sleeps this long per batch",
    )
    bench.add_argument(
        "--chute-only",
        action="store_true",
        help="--sweep: leave the DataLoader half out (e.g. for a quick --consumer-ms check)",
    )
    bench.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="--sweep: draw throughput against workers to this file; --sweep-storage: throughput "
        "against pixel error (needs matplotlib)",
    )
    bench.add_argument(
        "--sweep-storage",
        action="store_true",
        help="one run over the same photos: the originals, `chute pack --max-side` 512/320/256, raw "
        "at 256, decode='reduced', (with --ffcv-python) FFCV at max_resolution=256: img/s per "
        "core, bytes on disk, pixel error against exact decoding of the originals",
    )
    bench.add_argument(
        "--reducing-gap",
        type=float,
        default=3.0,
        help="--sweep-storage: the reducing_gap of the decode='reduced' row (default 3.0)",
    )
    bench.add_argument(
        "--images", type=_positive, help="--sweep-storage: only the first N photos of the dataset (default: all)"
    )
    bench.add_argument(
        "--ffcv-python",
        metavar="PYTHON",
        help="--sweep-storage: a Python interpreter with ffcv installed, for the FFCV row",
    )
    doctor = sub.add_parser(
        "doctor",
        help="find where a training job's input pipeline stalls, and say what to change",
        description="Runs SCRIPT (with its arguments) in this process and watches the first DataLoader or "
        "chute.Loader it iterates (or the loader it passes to chute.doctor.watch): after --warmup + "
        "--steps batches it prints the diagnosis and lets the script go on. With no SCRIPT, it "
        "diagnoses a DataLoader over the generated bench dataset as a demonstration.",
    )
    doctor.add_argument("--report", type=Path, metavar="HTML", help="also write a self-contained HTML report")
    doctor.add_argument(
        "--screenshot",
        type=Path,
        metavar="PNG",
        help="with --report: also render the report to a PNG in headless Chromium",
    )
    doctor.add_argument("--steps", type=_positive, default=20, help="batches to measure (default 20)")
    doctor.add_argument("--warmup", type=int, default=3, help="batches before measuring (default 3)")
    doctor.add_argument(
        "--max-steps",
        type=_positive,
        help="measure up to this many batches while the stall's 95%% interval straddles the "
        "input-bound threshold (default 5 x --steps)",
    )
    doctor.add_argument(
        "--sweep",
        action="store_true",
        help="no SCRIPT: also run `chute bench --sweep` (one round) and put its plot in the report",
    )
    doctor.add_argument("script", nargs="?", help="a Python training script")
    doctor.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    pack_cli.add_parsers(sub)
    cache_cli.add_parsers(sub)
    return parser


def _doctor(args: argparse.Namespace) -> int:
    import warnings

    from rich.console import Console

    from chute.doctor import run_script

    console = Console()
    if args.warmup < 0:
        console.print("chute doctor: --warmup must be >= 0")
        return 2
    if args.sweep and args.script is not None:
        console.print("chute doctor: --sweep goes with the demonstration (no SCRIPT)")
        return 2
    if args.screenshot and not args.report:
        console.print("chute doctor: --screenshot renders the --report; give both")
        return 2
    if args.sweep:
        from chute.doctor.report_html import have_matplotlib

        if not have_matplotlib():  # checked before minutes of measurement, not after
            console.print("chute doctor: --sweep draws a plot with matplotlib: pip install 'chute[plot]'")
            return 2
    if args.script is not None:
        if not Path(args.script).is_file():
            console.print(f"chute doctor: no such script: {args.script}")
            return 2
        found = run_script(
            args.script,
            args.args,
            steps=args.steps,
            warmup=args.warmup,
            max_steps=args.max_steps,
            report=str(args.report) if args.report else None,
        )
        if not found:
            console.print(
                "chute doctor: the script iterated no DataLoader, chute.Loader or chute.ray.RemoteLoader; nothing was measured"
            )
            return 1
        if args.report:
            _shoot(args, console)
        return 0

    from chute.bench import torch_peer
    from chute.bench.dataset import ensure_dataset
    from chute.doctor import doctor

    root = ensure_dataset()
    loader = torch_peer.make_dataloader(root, batch_size=64, num_workers=1, persistent_workers=False)
    console.print(
        f"chute doctor: no script given; diagnosing a DataLoader over {root} as a demonstration "
        "(ImageFolder + PIL transforms, num_workers=1, batch 64)"
    )
    with console.status("measuring"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        d = doctor(loader, steps=args.steps, warmup=args.warmup, max_steps=args.max_steps)
        if args.sweep:
            d.sweep_png = _sweep_png(root)
    d.print(console)
    if args.report:
        d.save_html(args.report)
        _shoot(args, console)
    return 0


def _shoot(args: argparse.Namespace, console) -> None:
    console.print(f"report: {args.report}")
    if args.screenshot:
        from chute.doctor.report_html import screenshot

        screenshot(args.report, args.screenshot)
        console.print(f"screenshot: {args.screenshot}")


def _sweep_png(root: Path) -> bytes:
    import tempfile

    from chute.bench.sweep import plot, run_sweep

    result = run_sweep(root, rounds=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.png"
        plot(result, path)
        return path.read_bytes()


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from chute.bench.dataset import ensure_dataset, ensure_remote_dataset
    from chute.bench.run import run_bench

    # Piped output (CI logs, `| tee`) gets room for the tables instead of rich's 80-column default.
    stream = sys.stderr if args.json else sys.stdout
    console = Console(stderr=args.json, width=None if stream.isatty() else 120)
    if args.sweep and args.sweep_storage:
        console.print("chute bench: --sweep and --sweep-storage are separate runs; give one")
        return 2
    if not args.sweep and (args.consumer_ms or args.chute_only):
        console.print("chute bench: --consumer-ms and --chute-only go with --sweep")
        return 2
    if not (args.sweep or args.sweep_storage) and args.plot:
        console.print("chute bench: --plot goes with --sweep or --sweep-storage")
        return 2
    if not args.sweep_storage and (args.ffcv_python or args.reducing_gap != 3.0 or args.images):
        console.print("chute bench: --ffcv-python, --reducing-gap and --images go with --sweep-storage")
        return 2
    if not args.reducing_gap >= 1.0:
        console.print(f"chute bench: --reducing-gap must be >= 1.0, as in Pillow; got {args.reducing_gap}")
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            console.print("chute bench: --plot needs matplotlib: pip install matplotlib (or pip install 'chute[plot]')")
            return 2
    if args.root is not None:
        root = args.root
    elif args.remote:
        root = ensure_remote_dataset(progress=not args.json)
    else:
        root = ensure_dataset(progress=not args.json)
    if args.sweep:
        return _sweep(args, root, console)
    if args.sweep_storage:
        return _sweep_storage(args, root, console)
    if args.remote:
        return _remote(args, root, console)
    with console.status("benchmarking") as status:
        result = run_bench(
            root,
            pipeline=args.pipeline,
            batch_size=args.batch_size,
            rounds=args.rounds,
            workers=args.workers,
            threads=args.threads,
            packed_path=args.source,
            on_step=lambda step: status.update(f"benchmarking: {step}"),
        )
    if args.json:
        print(
            json.dumps(
                {
                    "pipeline": result.pipeline,
                    "images": result.images,
                    "batch_size": result.batch_size,
                    "cores": result.cores,
                    "peer": result.peer,
                    "root": str(root),
                    "results": [
                        {
                            "name": m.name,
                            "kind": m.kind,
                            "cores": m.cores,
                            "img_per_s": m.rate,
                            "img_per_s_per_core": m.per_core,
                            "rates": m.rates,
                            "ratio_to_best_dataloader": result.ratio(m),
                        }
                        for m in result.measurements
                    ],
                },
                indent=2,
            )
        )
        return 0
    table = Table(
        title=f"chute bench: {result.pipeline} pipeline, {result.images} images, batch "
        f"{result.batch_size}, {result.cores} cores (median of {args.rounds} epochs, hot cache)"
    )
    table.add_column("configuration")
    table.add_column("img/s", justify="right")
    table.add_column("range", justify="right")
    table.add_column("per core", justify="right")
    table.add_column("vs best DL", justify="right")
    best = result.best_dataloader()
    for m in result.measurements:
        style = "bold green" if m.kind == "chute" else ("bold" if m is best else None)
        table.add_row(
            m.name,
            f"{m.rate:,.0f}",
            m.summary.range_text(",.0f"),
            f"{m.per_core:,.0f}",
            f"{result.ratio(m):.2f}x",
            style=style,
        )
    console.print(table)
    console.print(
        f"dataset: {root}\nDataLoader peer: ImageFolder + PIL + {result.peer} transforms.\n"
        "range: slowest and fastest epoch. per core: img/s divided by the threads or worker "
        "processes the configuration may use (at most the machine's cores). ref: libjpeg-turbo "
        "alone on 1 thread: whole images, only RandomResizedCrop boxes, or (eval) only the window Resize + "
        "CenterCrop plan. vs best DL: ratio to "
        "the fastest DataLoader setting."
        + (
            " read: every sample's bytes read once by the source, no decode (the storage layer alone)."
            if args.source
            else ""
        )
    )
    return 0


def _sweep(args: argparse.Namespace, root: Path, console) -> int:
    import warnings

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Table

    from chute.bench.harness import Summary
    from chute.bench.run import available_cores
    from chute.bench.sweep import grid, plot, run_sweep

    families = ("chute",) if args.chute_only else ("dataloader", "chute")
    steps = len([c for c in grid(available_cores()) if c.family in families]) * (1 + args.rounds) + 2 * (
        1 + args.rounds
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress, warnings.catch_warnings():
        # pin_memory=True on a machine without an accelerator: torch warns once per epoch that it pins nothing.
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        # 2 x cores workers is part of the grid on purpose: torch warns that it exceeds the core count.
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        task = progress.add_task("sweep", total=steps)

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


def _sweep_storage(args: argparse.Namespace, root: Path, console) -> int:
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


def _remote(args, root, console) -> int:
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        return _bench(args)
    if args.command in pack_cli.COMMANDS:
        return pack_cli.run(args)
    if args.command == "doctor":
        return _doctor(args)
    if args.command in cache_cli.COMMANDS:
        return cache_cli.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
