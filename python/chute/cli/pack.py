"""The ``chute pack``, ``chute merge`` and ``chute index`` subcommands: argument parsing and printing only;
chute.packed does the work."""

from __future__ import annotations

import argparse
import json
import os
import time

from chute.cli import args as types
from chute.cli.terminal import progress_bar, reporting_errors


def _shard_size(text: str) -> int:
    return types.size(text, at_least=4096)


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
        type=_shard_size,
        default=_shard_size("1GB"),
        help="target bytes per shard: 1GB, 512MB, 256MiB, ... (default 1GB)",
    )
    p.add_argument("--threads", type=types.positive, help="reader threads (default: all cores)")
    p.add_argument("--part", type=int, help="write only part i of --parts n (run `chute merge DST` after all)")
    p.add_argument("--parts", type=types.positive)
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
        type=types.positive,
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
        type=types.size,
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
        type=types.positive,
        metavar="N",
        help="resize images whose longer side exceeds N to longer side N (shorter side int(N*s/l))",
    )
    cap.add_argument(
        "--max-shorter-side",
        type=types.positive,
        metavar="N",
        help="resize images whose shorter side exceeds N to shorter side N, as Resize(N)",
    )
    less.add_argument(
        "--quality", type=types.quality, metavar="Q", help="JPEG quality of re-encoded images (default 90)"
    )
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
        type=types.positive,
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
    p.set_defaults(run=reporting_errors(_pack))
    m.set_defaults(run=reporting_errors(_merge))
    i.set_defaults(run=reporting_errors(_index))


def _pack(args, console) -> int:
    import chute.packed as packed

    if args.ray:
        return _pack_on_ray(args, console)
    if (args.part is None) != (args.parts is None):
        raise SystemExit("chute pack: give both --part and --parts, or neither")
    start = time.perf_counter()
    with progress_bar(console, f"packing {args.src}") as bar:
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


def _merge(args, console) -> int:
    from chute.packed import merge
    from chute.sources import INDEX_FILE

    s = merge(args.dst)
    console.print(f"merged {s.shards} shards, {s.samples:,} samples into {os.path.join(args.dst, INDEX_FILE)}")
    return 0


def _index(args, console) -> int:
    from chute.packed import index

    for path in args.paths:
        for tar in index(path):
            console.print(f"indexed {tar} -> {tar}.chidx")
    return 0
