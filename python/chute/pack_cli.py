"""The ``chute pack``, ``chute merge``, ``chute index`` and ``chute inspect`` subcommands: argument parsing
and printing only; chute.packed does the work."""

from __future__ import annotations

import argparse
import json
import os
import time

COMMANDS = ("pack", "merge", "index", "inspect")


def _size(text: str) -> int:
    from chute.packed import parse_size

    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value < 4096:
        raise argparse.ArgumentTypeError("the shard size must be at least 4096 bytes")
    return value


def _max_file_bytes(text: str) -> int:
    from chute.packed import parse_size

    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "pack", help="pack a dataset into chute's shard format",
        description="Packs SRC (an ImageFolder directory, a file list of '<path> <label>' lines, tar / "
                    "WebDataset shards as a .tar, a glob or a directory of tars, or a packed dataset) into "
                    "DST as shards with an index, in parallel. Files appear under their final names only "
                    "when the pack is complete.")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--shard-size", type=_size, default=_size("1GB"),
                   help="target bytes per shard: 1GB, 512MB, 256MiB, ... (default 1GB)")
    p.add_argument("--threads", type=_positive, help="reader threads (default: all cores)")
    p.add_argument("--part", type=int, help="write only part i of --parts n (run `chute merge DST` after all)")
    p.add_argument("--parts", type=_positive)
    p.add_argument("--max-file-bytes", type=_max_file_bytes, default=1 << 30,
                   help="refuse sample files larger than this: 1GB, 512MB, ... (default 1GiB)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    m = sub.add_parser("merge", help="write the index of a pack split with --part/--parts",
                       description="Writes DST/index.chidx from the part indexes of `chute pack --part i --parts n`, "
                                   "once every part is there.")
    m.add_argument("dst")

    i = sub.add_parser("index", help="index tar / WebDataset shards ahead of their first open",
                       description="Writes <tar>.chidx beside each tar file (a .tar, a glob or a directory).")
    i.add_argument("paths", nargs="+")

    s = sub.add_parser("inspect", help="summarise a packed dataset or tar shards",
                       description="Prints samples, classes, shards, bytes, format version and the size "
                                   "distribution of the images. --verify checks every record's checksum "
                                   "and names every bad record.")
    s.add_argument("path")
    s.add_argument("--verify", action="store_true")
    s.add_argument("--threads", type=_positive, help="threads for --verify (default: all cores)")
    s.add_argument("--json", action="store_true")


def _progress_bar(console, description: str):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True)


def _pack(args, console) -> int:
    import chute.packed as packed

    if (args.part is None) != (args.parts is None):
        raise SystemExit("chute pack: give both --part and --parts, or neither")
    start = time.perf_counter()
    with _progress_bar(console, f"packing {args.src}") as bar:
        task = bar.add_task("pack", total=None, rate="")

        def progress(samples: int, nbytes: int, total: int) -> None:
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.update(task, completed=samples, total=total,
                       rate=f"{nbytes / 1e6 / elapsed:,.0f} MB/s {samples / elapsed:,.0f} img/s")

        summary = packed.pack(args.src, args.dst, shard_size=args.shard_size, num_threads=args.threads,
                              part=args.part, parts=args.parts, progress=progress,
                              max_file_bytes=args.max_file_bytes)
    result = {"samples": summary.samples, "payload_bytes": summary.payload_bytes, "file_bytes": summary.file_bytes,
              "shards": summary.shards, "seconds": round(summary.seconds, 3),
              "mb_per_s": round(summary.mb_per_s, 1), "img_per_s": round(summary.img_per_s, 1)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        what = f"part {args.part} of {args.parts}" if args.parts else "dataset"
        console.print(f"packed {what}: {summary.samples:,} samples, {summary.payload_bytes / 1e6:,.1f} MB in "
                      f"{summary.shards} shards, {summary.seconds:.2f} s: {summary.mb_per_s:,.1f} MB/s, "
                      f"{summary.img_per_s:,.0f} img/s -> {args.dst}")
        if args.parts:
            console.print(f"after every part: chute merge {args.dst}")
    return 0


def _inspect(args, console) -> int:
    import chute.packed as packed

    dataset = packed.open(args.path)
    info = packed.describe(dataset)
    bad: list[tuple[int, str]] = []
    if args.verify:
        if isinstance(dataset, packed.PackedDataset):
            with _progress_bar(console, "verifying") as bar:
                task = bar.add_task("verify", total=len(dataset), rate="")
                bad = packed.verify(dataset, num_threads=args.threads, progress=lambda n: bar.advance(task, n))
            info["verified"] = {"records": len(dataset), "bad": [{"index": i, "error": e} for i, e in bad]}
        else:
            info["verified"] = "tar members carry no checksums; headers and bounds were checked when indexed"
    if args.json:
        print(json.dumps(info, indent=2))
        return 1 if bad else 0
    from rich.table import Table

    table = Table(title=f"chute inspect {args.path}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    sizes = info["image_bytes"]
    table.add_row("format", f"{info['kind']}" + (f", version {info['format_version']}" if info["format_version"] else ""))
    table.add_row("samples", f"{info['samples']:,}" + (f" ({info['unlabelled']:,} unlabelled)" if info["unlabelled"] else ""))
    table.add_row("classes", f"{info['classes']:,}")
    table.add_row("shards", f"{len(info['shards']):,}")
    table.add_row("bytes", f"{info['bytes']:,} on disk, {info['payload_bytes']:,} of images")
    table.add_row("image bytes", "  ".join(f"{k} {v:,.0f}" for k, v in sizes.items()))
    console.print(table)
    if args.verify and isinstance(dataset, packed.PackedDataset):
        for i, error in bad:
            console.print(f"[red]bad record {i}[/red]: {error}")
        console.print(f"verified {len(dataset):,} records: " + (f"[red]{len(bad)} bad[/red]" if bad else "all good"))
    elif args.verify:
        console.print(info["verified"])
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    import chute.packed as packed

    console = Console(stderr=getattr(args, "json", False))
    try:
        if args.command == "pack":
            return _pack(args, console)
        if args.command == "merge":
            s = packed.merge(args.dst)
            console.print(f"merged {s.shards} shards, {s.samples:,} samples into {os.path.join(args.dst, packed.INDEX_FILE)}")
            return 0
        if args.command == "index":
            for path in args.paths:
                for tar in packed.index(path):
                    console.print(f"indexed {tar} -> {tar}.chidx")
            return 0
        return _inspect(args, console)
    except (OSError, ValueError, RuntimeError) as e:
        console.print(f"[red]chute {args.command}: {e}[/red]")
        return 2
