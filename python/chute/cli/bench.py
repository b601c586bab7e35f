"""The ``chute bench`` subcommand: argument parsing, the checks of its options, and the table of the default
run; ``--sweep`` / ``--sweep-storage`` print through chute/cli/bench_sweep.py, ``--remote`` through
bench_remote.py. chute.bench does the work."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chute.cli import args as types


def add_parsers(sub) -> None:
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
    bench.add_argument("--batch-size", type=types.positive, default=256)
    bench.add_argument("--rounds", type=types.positive, default=3, help="timed epochs per configuration (median)")
    bench.add_argument("--workers", type=types.worker_counts, help="DataLoader num_workers to try (default: 0..cores)")
    bench.add_argument("--threads", type=types.positive, help="chute threads (default: all cores)")
    bench.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    bench.add_argument(
        "--source",
        help="also run chute on this packed dataset or tar shards (chute.open), "
        "interleaved with the same loader on the ImageFolder --root",
    )
    bench.add_argument(
        "--remote",
        action="store_true",
        help="serve the dataset (packed shards and WebDataset tars) over HTTP on loopback (nginx, Debian's "
        "nginx-light) with --latency-ms added per request, and compare chute reading it remotely (cold and warm cache) with chute on the "
        "local shards and with WebDataset + DataLoader over HTTP, in one run (with no --root, on a generated "
        "dataset of 8,000 JPEGs, so that a cold epoch's downloads run through it)",
    )
    bench.add_argument(
        "--latency-ms", type=types.non_negative_float, default=20.0, help="--remote: latency added per request"
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
        type=types.non_negative_float,
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
        "--images", type=types.positive, help="--sweep-storage: only the first N photos of the dataset (default: all)"
    )
    bench.add_argument(
        "--ffcv-python",
        metavar="PYTHON",
        help="--sweep-storage: a Python interpreter with ffcv installed, for the FFCV row",
    )
    bench.set_defaults(run=_bench)


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
    if args.remote:
        from chute.cli.bench_remote import nginx_missing

        if nginx_missing(console):  # before a dataset is generated or packed
            return 2
    if args.root is not None:
        root = args.root
    elif args.remote:
        root = ensure_remote_dataset(progress=not args.json)
    else:
        root = ensure_dataset(progress=not args.json)
    if args.sweep:
        from chute.cli.bench_sweep import sweep

        return sweep(args, root, console)
    if args.sweep_storage:
        from chute.cli.bench_sweep import sweep_storage

        return sweep_storage(args, root, console)
    if args.remote:
        from chute.cli.bench_remote import remote

        return remote(args, root, console)
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
