"""The ``chute`` command line. Subcommands live here only as argument parsing and printing; the work is
done by the library (chute.bench.run for ``bench``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chute import pack_cli


def _parse_workers(text: str) -> list[int]:
    try:
        workers = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not workers or any(w < 0 for w in workers):
        raise argparse.ArgumentTypeError("worker counts must be >= 0")
    return workers


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chute", description="Keeps GPUs fed: chute's tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench", help="benchmark chute against the PyTorch DataLoader",
        description="Runs chute and the PyTorch DataLoader side by side over the same images, on the same "
                    "cores, interleaved, and prints img/s and the ratio to the best DataLoader setting. With "
                    "no --root, it generates (once) and uses an ImageNet-like dataset of 2000 JPEGs.")
    bench.add_argument("--root", type=Path, help="an ImageFolder directory (default: the generated dataset)")
    bench.add_argument("--pipeline", choices=("train", "eval"), default="train",
                       help="train: RandomResizedCrop(224)+flip+normalise; eval: Resize(256)+CenterCrop(224)+normalise")
    bench.add_argument("--batch-size", type=_positive, default=256)
    bench.add_argument("--rounds", type=_positive, default=3, help="timed epochs per configuration (median)")
    bench.add_argument("--workers", type=_parse_workers, help="DataLoader num_workers to try (default: 0..cores)")
    bench.add_argument("--threads", type=_positive, help="chute threads (default: all cores)")
    bench.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    bench.add_argument("--source", help="also run chute on this packed dataset or tar shards (chute.open), "
                                        "interleaved with the same loader on the ImageFolder --root")
    pack_cli.add_parsers(sub)
    return parser


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from chute.bench.dataset import ensure_dataset
    from chute.bench.run import run_bench

    console = Console(stderr=args.json)
    root = args.root if args.root is not None else ensure_dataset(progress=not args.json)
    with console.status("benchmarking") as status:
        result = run_bench(root, pipeline=args.pipeline, batch_size=args.batch_size, rounds=args.rounds,
                           workers=args.workers, threads=args.threads, packed_path=args.source,
                           on_step=lambda step: status.update(f"benchmarking: {step}"))
    if args.json:
        print(json.dumps({
            "pipeline": result.pipeline, "images": result.images, "batch_size": result.batch_size,
            "cores": result.cores, "peer": result.peer, "root": str(root),
            "results": [{"name": m.name, "kind": m.kind, "cores": m.cores, "img_per_s": m.rate,
                         "img_per_s_per_core": m.per_core, "rates": m.rates,
                         "ratio_to_best_dataloader": result.ratio(m)} for m in result.measurements],
        }, indent=2))
        return 0
    table = Table(title=f"chute bench: {result.pipeline} pipeline, {result.images} images, batch "
                        f"{result.batch_size}, {result.cores} cores (median of {args.rounds} epochs, hot cache)")
    table.add_column("configuration")
    table.add_column("img/s", justify="right")
    table.add_column("range", justify="right")
    table.add_column("per core", justify="right")
    table.add_column("vs best DL", justify="right")
    best = result.best_dataloader()
    for m in result.measurements:
        style = "bold green" if m.kind == "chute" else ("bold" if m is best else None)
        spread = f"{min(m.rates):,.0f}-{max(m.rates):,.0f}"
        table.add_row(m.name, f"{m.rate:,.0f}", spread, f"{m.per_core:,.0f}", f"{result.ratio(m):.2f}x", style=style)
    console.print(table)
    console.print(f"dataset: {root}\nDataLoader peer: ImageFolder + PIL + {result.peer} transforms.\n"
                  "range: slowest and fastest epoch. per core: img/s divided by the threads or worker "
                  "processes the configuration may use (at most the machine's cores). ref: libjpeg-turbo "
                  "alone on 1 thread, whole images or only RandomResizedCrop windows. vs best DL: ratio to "
                  "the fastest DataLoader setting." + (" read: every sample's bytes read once by the source, "
                  "no decode (the storage layer alone)." if args.source else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        return _bench(args)
    if args.command in pack_cli.COMMANDS:
        return pack_cli.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
