"""The ``chute inspect`` subcommand: argument parsing and printing only; chute.inspection does the work."""

from __future__ import annotations

import json
import os

from chute.cli import args as types
from chute.cli.terminal import printable, progress_bar, reporting_errors


def add_parsers(sub) -> None:
    s = sub.add_parser(
        "inspect",
        help="summarise a packed dataset, tar shards, TFRecord files, an LMDB or an image folder",
        description="Prints samples, classes, shards, bytes, format version and the size "
        "distribution of the images. --verify checks every record's checksum, "
        "decodes every image whole, and names every bad record.",
    )
    s.add_argument("path")
    s.add_argument("--verify", action="store_true")
    s.add_argument("--threads", type=types.positive, help="threads for --verify (default: all cores)")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--compare",
        metavar="SRC",
        help="the source the pack was written from: report PSNR and max error of the stored pixels "
        "against the source's (decoded with PIL, resized with BILINEAR to the stored size)",
    )
    s.add_argument("--sample", type=types.positive, default=64, help="records compared by --compare (default 64)")
    s.set_defaults(run=reporting_errors(_inspect))


def _plain_image_folder(path: str):
    """The ImageFolder at ``path`` when it is a plain image directory (no index, no shards, no tar files),
    else None."""
    from chute.sources import INDEX_FILE, ImageFolder

    if not os.path.isdir(path) or os.path.exists(os.path.join(path, INDEX_FILE)):
        return None
    names = os.listdir(path)
    if any(n.endswith((".chute", ".chidx", ".tar", ".tmp")) or ".tmp-" in n for n in names):
        return None  # shards, part indexes, tar files or an interrupted pack's leftovers: not a plain folder
    try:
        return ImageFolder(path)
    except (OSError, ValueError):
        return None


def _verify_images(dataset, console, args) -> list[tuple[int, str]]:
    """Decodes every image of ``dataset`` whole, as ``Loader(validate='full')`` would: the bad ones."""
    from chute.inspection import check_images

    with progress_bar(console, "decoding") as bar:
        task = bar.add_task("decode", total=len(dataset), rate="")
        return check_images(dataset, validate="full", num_threads=args.threads, progress=lambda n: bar.advance(task, n))


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
    from chute import inspection
    from chute.resolve import open as open_dataset
    from chute.sources import PackedDataset

    folder = _plain_image_folder(args.path)
    if folder is not None:
        return _inspect_folder(args, console, folder)
    dataset = open_dataset(args.path)
    info = inspection.describe(dataset)
    bad: list[tuple[int, str]] = []
    if args.verify:
        found: dict[int, str] = {}
        if isinstance(dataset, PackedDataset):
            with progress_bar(console, "verifying") as bar:
                task = bar.add_task("verify", total=len(dataset), rate="")
                found.update(
                    inspection.verify(dataset, num_threads=args.threads, progress=lambda n: bar.advance(task, n))
                )
        # Then decode every image whole: what the loader would refuse (a checksum error is reported once).
        for i, error in _verify_images(dataset, console, args):
            found.setdefault(i, error)
        bad = sorted(found.items())
        info["verified"] = {"records": len(dataset), "bad": [{"index": i, "error": e} for i, e in bad]}
    if args.compare is not None:
        if not isinstance(dataset, PackedDataset):
            raise ValueError("--compare compares a packed dataset with its source; this is not a packed dataset")
        info["compared"] = inspection.compare(dataset, args.compare, sample=args.sample)
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
        examples = ", ".join(printable(e) for e in skip["examples"])
        table.add_row(
            "skipped",
            f"{skip['count']:,} {skip['reason']}: {examples}"
            + (", ..." if skip["count"] > len(skip["examples"]) else ""),
        )
    console.print(table)
    if args.verify:
        for i, error in bad:
            console.print(f"[red]bad record {i}[/red]: {error}")
        what = "checksummed and decoded" if isinstance(dataset, PackedDataset) else "decoded"
        console.print(f"{what} {len(dataset):,} records: " + (f"[red]{len(bad)} bad[/red]" if bad else "all good"))
    return 1 if bad else 0
