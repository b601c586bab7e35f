"""The ``chute cache ls`` and ``chute cache clear`` subcommands: argument parsing and printing only;
chute.cache and the native ShardCache do the work."""

from __future__ import annotations

import argparse
import os
import time


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "cache",
        help="list or clear the local cache of remote shards",
        description="The node-local cache of remote shards, shared by every process on the node. It lives in "
        "<cache dir>/shards, the cache dir being --cache-dir, else $CHUTE_CACHE_DIR, else "
        "$XDG_CACHE_HOME/chute, else ~/.cache/chute (the cache_dir= of chute.open).",
    )
    actions = p.add_subparsers(dest="cache_command", required=True)
    ls = actions.add_parser("ls", help="list the cached shards: key, size, last used; the total and the limit")
    clear = actions.add_parser("clear", help="remove every cached shard (except those being filled right now)")
    for a in (ls, clear):
        a.add_argument("--cache-dir", metavar="DIR", help="chute's cache directory (the shards are in DIR/shards)")
    ls.add_argument("--json", action="store_true", help="print the entries as JSON")
    p.set_defaults(run=run)


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 kB"``: decimal units, as sizes are written (``cache_limit="50GB"`` is 50 * 10**9);
    exact bytes below 1 kB."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from chute.cache import open_shard_cache, recorded_limit, shard_cache_dir

    console = Console()
    directory = shard_cache_dir(args.cache_dir)
    if not os.path.isdir(directory):  # ls and clear create nothing
        console.print(f"chute cache: nothing cached yet: {directory} does not exist", markup=False)
        return 0
    try:
        cache = open_shard_cache(args.cache_dir)
    except OSError as e:
        console.print(f"chute cache: {e}", markup=False)
        return 1
    if args.cache_command == "clear":
        before = cache.list()
        cache.clear()
        left = cache.list()
        freed = sum(e["size"] for e in before) - sum(e["size"] for e in left)
        console.print(
            f"removed {len(before) - len(left)} entries ({human_bytes(max(freed, 0))}) from {cache.dir}", markup=False
        )
        if left:
            console.print(f"{len(left)} entries are being filled right now and were kept", markup=False)
        return 0
    return _ls(cache, recorded_limit(args.cache_dir), console, as_json=args.json)


def _ls(cache, limit: int, console, *, as_json: bool) -> int:
    import json

    from rich.markup import escape
    from rich.table import Table

    entries = cache.list()
    total = sum(e["size"] for e in entries)
    if as_json:
        print(json.dumps({"dir": cache.dir, "entries": entries, "total_bytes": total, "limit_bytes": limit}, indent=2))
        return 0
    table = Table(title="chute cache")
    table.add_column("key")
    table.add_column("size", justify="right")
    table.add_column("last used")
    for e in entries:
        used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["last_used_ns"] / 1e9))
        table.add_row(escape(e["key"] or "(key unknown)"), human_bytes(e["size"]), used)
    console.print(table)
    limit_text = (
        f"{human_bytes(limit)} (set by the last job that opened the cache with one)" if limit else "none recorded"
    )
    console.print(f"directory: {cache.dir}", markup=False, soft_wrap=True)
    console.print(f"total: {human_bytes(total)} in {len(entries)} entries; limit: {limit_text}", markup=False)
    return 0
