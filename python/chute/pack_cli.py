"""The ``chute pack``, ``chute merge``, ``chute index`` and ``chute inspect`` subcommands: argument parsing
and printing only; chute.packed does the work."""

from __future__ import annotations

import argparse
import json
import os
import time

COMMANDS = ("pack", "merge", "index", "inspect")


def _size(text: str) -> int:
    from chute._validate import parse_size

    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value < 4096:
        raise argparse.ArgumentTypeError("the shard size must be at least 4096 bytes")
    return value


def _max_file_bytes(text: str) -> int:
    from chute._validate import parse_size

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


def _quality(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be in [1, 100], got {value}")
    return value


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "pack",
        help="pack a dataset into chute's shard format",
        description="Packs SRC (an ImageFolder directory, a file list of '<path> <label>' lines, tar / "
        "WebDataset shards as a .tar, a glob or a directory of tars, TFRecord files, an LMDB environment "
        "(docs/FORMATS.md), or a packed dataset) into "
        "DST as shards with an index, in parallel. Files appear under their final names only "
        "when the pack is complete.",
    )
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument(
        "--shard-size",
        type=_size,
        default=_size("1GB"),
        help="target bytes per shard: 1GB, 512MB, 256MiB, ... (default 1GB)",
    )
    p.add_argument("--threads", type=_positive, help="reader threads (default: all cores)")
    p.add_argument("--part", type=int, help="write only part i of --parts n (run `chute merge DST` after all)")
    p.add_argument("--parts", type=_positive)
    p.add_argument(
        "--validate",
        choices=("header", "full"),
        default="header",
        help="check each image before packing it: 'header' (default: a format chute decodes, its "
        "dimensions, the pixel cap) or 'full' (decode every pixel: also finds damaged data, "
        "at the cost of a decode per image)",
    )
    p.add_argument(
        "--max-pixels",
        type=_positive,
        default=200_000_000,
        help="the largest image (width x height) to pack, as Loader(max_pixels=...) (default 200000000)",
    )
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out, and list, files the loader could not decode instead of stopping",
    )
    p.add_argument(
        "--max-file-bytes",
        type=_max_file_bytes,
        default=1 << 30,
        help="refuse sample files larger than this: 1GB, 512MB, ... (default 1GiB)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    less = p.add_argument_group(
        "store less",
        "trade exactness for speed, knowingly (docs/STORE_LESS.md): resize to a cap with PIL's "
        "BILINEAR resize, re-encode, or store raw pixels the loader reads with no decode",
    )
    cap = less.add_mutually_exclusive_group()
    cap.add_argument(
        "--max-side",
        type=_positive,
        metavar="N",
        help="resize images whose longer side exceeds N to longer side N (shorter side int(N*s/l))",
    )
    cap.add_argument(
        "--max-shorter-side",
        type=_positive,
        metavar="N",
        help="resize images whose shorter side exceeds N to shorter side N, as Resize(N)",
    )
    less.add_argument("--quality", type=_quality, metavar="Q", help="JPEG quality of re-encoded images (default 90)")
    less.add_argument(
        "--subsampling", choices=("420", "444"), help="chroma subsampling of re-encoded JPEGs (default 420)"
    )
    less.add_argument(
        "--keep-original",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="store an image that needs no resize as its source bytes: no added loss (default); "
        "--no-keep-original re-encodes every image at --quality",
    )
    less.add_argument("--raw", action="store_true", help="store every image as raw RGB pixels (no decode when read)")
    less.add_argument(
        "--raw-below",
        type=_positive,
        metavar="PIXELS",
        help="store raw the images whose stored size has fewer than PIXELS pixels",
    )
    less.add_argument("--raw-compression", choices=("zstd", "none"), help="compression of raw records (default zstd)")
    p.add_argument(
        "--ray",
        action="store_true",
        help="run the parts as Ray tasks on the cluster (RAY_ADDRESS, or one `ray start` began "
        "here, else a local one), then the merge: --parts tasks (default: one per CPU of the "
        "cluster, each with --threads reader threads, default 1). SRC and DST must be paths "
        "every node can reach. Needs chute[ray]",
    )

    m = sub.add_parser(
        "merge",
        help="write the index of a pack split with --part/--parts",
        description="Writes DST/index.chidx from the part indexes of `chute pack --part i --parts n`, "
        "once every part is there.",
    )
    m.add_argument("dst")

    i = sub.add_parser(
        "index",
        help="index tar / WebDataset shards ahead of their first open",
        description="Writes <tar>.chidx beside each tar file (a .tar, a glob or a directory), "
        "where opens look first. Without it, indexes are built on first open "
        "and cached in $CHUTE_CACHE_DIR (else $XDG_CACHE_HOME/chute), never "
        "beside the data.",
    )
    i.add_argument("paths", nargs="+")

    s = sub.add_parser(
        "inspect",
        help="summarise a packed dataset, tar shards, TFRecord files, an LMDB or an image folder",
        description="Prints samples, classes, shards, bytes, format version and the size "
        "distribution of the images. --verify checks every record's checksum, "
        "decodes every image whole, and names every bad record.",
    )
    s.add_argument("path")
    s.add_argument("--verify", action="store_true")
    s.add_argument("--threads", type=_positive, help="threads for --verify (default: all cores)")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--compare",
        metavar="SRC",
        help="the source the pack was written from: report PSNR and max error of the stored pixels "
        "against the source's (decoded with PIL, resized with BILINEAR to the stored size)",
    )
    s.add_argument("--sample", type=_positive, default=64, help="records compared by --compare (default 64)")


def _printable(name: str) -> str:
    """A file or member name for the terminal: bytes that are not UTF-8 as \\xNN, rich markup escaped."""
    from rich.markup import escape

    return escape(os.fsencode(name).decode("utf-8", "backslashreplace"))


def _progress_bar(console, description: str):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


def _pack(args, console) -> int:
    import chute.packed as packed

    if args.ray:
        return _pack_on_ray(args, console)
    if (args.part is None) != (args.parts is None):
        raise SystemExit("chute pack: give both --part and --parts, or neither")
    start = time.perf_counter()
    with _progress_bar(console, f"packing {args.src}") as bar:
        task = bar.add_task("pack", total=None, rate="")

        def progress(samples: int, nbytes: int, total: int) -> None:
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.update(
                task,
                completed=samples,
                total=total,
                rate=f"{nbytes / 1e6 / elapsed:,.0f} MB/s {samples / elapsed:,.0f} img/s",
            )

        summary = packed.pack(
            args.src,
            args.dst,
            shard_size=args.shard_size,
            num_threads=args.threads,
            part=args.part,
            parts=args.parts,
            progress=progress,
            **_checks_and_storage(args),
        )
    result = _summary_json(summary, args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        what = f"part {args.part} of {args.parts}" if args.parts else "dataset"
        console.print(
            f"packed {what}: {summary.samples:,} samples, {summary.payload_bytes / 1e6:,.1f} MB in "
            f"{summary.shards} shards, {summary.seconds:.2f} s: {summary.mb_per_s:,.1f} MB/s, "
            f"{summary.img_per_s:,.0f} img/s -> {args.dst}"
        )
        if summary.source_bytes != summary.payload_bytes:
            console.print(
                f"stored {summary.payload_bytes / 1e6:,.1f} MB of images from {summary.source_bytes / 1e6:,.1f} MB "
                f"of source files ({summary.payload_bytes / max(summary.source_bytes, 1):.1%})"
            )
        if args.parts:
            console.print(f"after every part: chute merge {args.dst}")
        if summary.skipped:
            console.print(f"[yellow]left out {len(summary.skipped):,} files the loader could not decode:[/yellow]")
            for i, path, error in summary.skipped:
                console.print(f"  sample {i} ({path}): {error}", markup=False, highlight=False)
    return 0


def _checks_and_storage(args) -> dict:
    """The pack arguments a local pack and a pack on Ray take alike: the checks and what to store."""
    return dict(
        validate=args.validate,
        skip_bad=args.skip_bad,
        max_pixels=args.max_pixels,
        max_file_bytes=args.max_file_bytes,
        max_side=args.max_side,
        max_shorter_side=args.max_shorter_side,
        quality=args.quality,
        keep_original=args.keep_original,
        raw=args.raw,
        raw_below=args.raw_below,
        raw_compression=args.raw_compression,
        subsampling=args.subsampling,
    )


def _summary_json(summary, args) -> dict:
    """A PackSummary as `chute pack --json` prints it."""
    return {
        "samples": summary.samples,
        "payload_bytes": summary.payload_bytes,
        "source_bytes": summary.source_bytes,
        "file_bytes": summary.file_bytes,
        "shards": summary.shards,
        "seconds": round(summary.seconds, 3),
        "mb_per_s": round(summary.mb_per_s, 1),
        "img_per_s": round(summary.img_per_s, 1),
        "validate": args.validate,
        "skipped": [{"index": i, "path": path, "error": e} for i, path, e in summary.skipped],
    }


def _pack_on_ray(args, console) -> int:
    if args.part is not None:
        raise SystemExit("chute pack --ray: --part is chosen per task; give --parts (the number of tasks) only")
    try:
        import chute.ray
    except ImportError as e:
        raise SystemExit(f"chute pack --ray: {e}") from None
    s = chute.ray.pack(
        args.src,
        args.dst,
        parts=args.parts,
        shard_size=args.shard_size,
        threads_per_task=args.threads,
        progress=not args.json,
        **_checks_and_storage(args),
    )
    result = _summary_json(s, args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(
            f"packed on Ray: {s.samples:,} samples, {s.payload_bytes / 1e6:,.1f} MB in {s.shards} shards, "
            f"{s.seconds:.2f} s: {s.mb_per_s:,.1f} MB/s, {s.img_per_s:,.0f} img/s -> {args.dst}"
        )
        for i, path, error in s.skipped:
            console.print(f"  left out sample {i} ({path}): {error}", markup=False, highlight=False)
    return 0


def _plain_image_folder(path: str):
    """The ImageFolder at ``path`` when it is a plain image directory (no index, no shards, no tar files),
    else None."""
    import chute.packed as packed

    if not os.path.isdir(path) or os.path.exists(os.path.join(path, packed.INDEX_FILE)):
        return None
    names = os.listdir(path)
    if any(n.endswith((".chute", ".chidx", ".tar", ".tmp")) or ".tmp-" in n for n in names):
        return None  # shards, part indexes, tar files or an interrupted pack's leftovers: not a plain folder
    try:
        return packed.ImageFolder(path)
    except (OSError, ValueError):
        return None


def _verify_images(dataset, console, args) -> list[tuple[int, str]]:
    """Decodes every image of ``dataset`` whole, as ``Loader(validate='full')`` would: the bad ones."""
    import chute.packed as packed

    with _progress_bar(console, "decoding") as bar:
        task = bar.add_task("decode", total=len(dataset), rate="")
        return packed.check_images(
            dataset, validate="full", num_threads=args.threads, progress=lambda n: bar.advance(task, n)
        )


def _inspect_folder(args, console, folder) -> int:
    n, k = len(folder), len(folder.classes)
    info = {"path": args.path, "kind": "image folder", "samples": n, "classes": k}
    bad: list[tuple[int, str]] = []
    if args.verify:
        bad = _verify_images(folder, console, args)
        info["verified"] = {"records": n, "bad": [{"index": i, "error": e} for i, e in bad]}
    if args.json:
        print(json.dumps(info, indent=2))
        return 1 if bad else 0
    console.print(
        f"{args.path}: an image folder, not a pack: {n:,} images in {k:,} classes "
        f"(`chute pack {args.path} DST` packs it)",
        markup=False,
        highlight=False,
    )
    if args.verify:
        for i, error in bad:
            console.print(f"[red]bad image {i}[/red]: {error}")
        console.print(f"decoded {n:,} images: " + (f"[red]{len(bad)} bad[/red]" if bad else "all good"))
    return 1 if bad else 0


def _inspect(args, console) -> int:
    import chute.packed as packed

    folder = _plain_image_folder(args.path)
    if folder is not None:
        return _inspect_folder(args, console, folder)
    dataset = packed.open(args.path)
    info = packed.describe(dataset)
    bad: list[tuple[int, str]] = []
    if args.verify:
        found: dict[int, str] = {}
        if isinstance(dataset, packed.PackedDataset):
            with _progress_bar(console, "verifying") as bar:
                task = bar.add_task("verify", total=len(dataset), rate="")
                found.update(packed.verify(dataset, num_threads=args.threads, progress=lambda n: bar.advance(task, n)))
        # Then decode every image whole: what the loader would refuse (a checksum error is reported once).
        for i, error in _verify_images(dataset, console, args):
            found.setdefault(i, error)
        bad = sorted(found.items())
        info["verified"] = {"records": len(dataset), "bad": [{"index": i, "error": e} for i, e in bad]}
    if args.compare is not None:
        if not isinstance(dataset, packed.PackedDataset):
            raise ValueError("--compare compares a packed dataset with its source; this is not a packed dataset")
        info["compared"] = packed.compare(dataset, args.compare, sample=args.sample)
    if args.json:
        print(json.dumps(info, indent=2))
        return 1 if bad else 0
    from rich.table import Table

    table = Table(title=f"chute inspect {args.path}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    sizes = info["image_bytes"]
    table.add_row(
        "format", f"{info['kind']}" + (f", version {info['format_version']}" if info["format_version"] else "")
    )
    table.add_row(
        "samples", f"{info['samples']:,}" + (f" ({info['unlabelled']:,} unlabelled)" if info["unlabelled"] else "")
    )
    table.add_row("classes", f"{info['classes']:,}")
    table.add_row("shards", f"{len(info['shards']):,}")
    table.add_row("bytes", f"{info['bytes']:,} on disk, {info['payload_bytes']:,} of images")
    table.add_row("image bytes", "  ".join(f"{k} {v:,.0f}" for k, v in sizes.items()))
    if "records" in info:
        table.add_row("records", "  ".join(f"{kind} {count:,}" for kind, count in info["records"].items()))
        if info["size_ratio"] is not None and info["source_bytes"] != info["payload_bytes"]:
            table.add_row(
                "vs source",
                f"{info['payload_bytes']:,} bytes of images from {info['source_bytes']:,} "
                f"of source files: {info['size_ratio']:.1%} ({info['size_ratio'] - 1:+.1%})",
            )
    if "compared" in info:
        c = info["compared"]
        psnr = (
            "identical"
            if c["psnr_db"] is None
            else (
                f"PSNR {c['psnr_db']:.2f} dB (lowest record "
                + ("identical" if c["min_psnr_db"] is None else f"{c['min_psnr_db']:.2f} dB")
                + ")"
            )
        )
        table.add_row(
            "vs source pixels",
            f"{c['records']} records: {psnr}, mean abs error {c['mean_abs_error']:.3f}, max error {c['max_error']}",
        )
    for skip in info.get("skipped", []):
        examples = ", ".join(_printable(e) for e in skip["examples"])
        table.add_row(
            "skipped",
            f"{skip['count']:,} {skip['reason']}: {examples}"
            + (", ..." if skip["count"] > len(skip["examples"]) else ""),
        )
    console.print(table)
    if args.verify:
        for i, error in bad:
            console.print(f"[red]bad record {i}[/red]: {error}")
        what = "checksummed and decoded" if isinstance(dataset, packed.PackedDataset) else "decoded"
        console.print(f"{what} {len(dataset):,} records: " + (f"[red]{len(bad)} bad[/red]" if bad else "all good"))
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
            console.print(
                f"merged {s.shards} shards, {s.samples:,} samples into {os.path.join(args.dst, packed.INDEX_FILE)}"
            )
            return 0
        if args.command == "index":
            for path in args.paths:
                for tar in packed.index(path):
                    console.print(f"indexed {tar} -> {tar}.chidx")
            return 0
        return _inspect(args, console)
    except (OSError, ValueError, RuntimeError) as e:
        console.print(f"[red]chute {args.command}: {_printable(str(e))}[/red]")
        return 2
