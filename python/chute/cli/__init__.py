"""The ``chute`` command line: one module per subcommand (``bench``, ``doctor``, ``pack`` / ``merge`` /
``index``, ``inspect``, ``cache``), each only argument parsing and printing; the work is the library's
(chute.bench, chute.doctor, chute.packed, chute.inspection, chute.cache). Each subcommand's parser names the
function that runs it (``set_defaults(run=...)``)."""

from __future__ import annotations

import argparse
import sys

from chute import __version__
from chute.cli import bench, cache, doctor, inspect, pack


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chute", description="Keeps GPUs fed: chute's tools.")
    parser.add_argument("--version", action="version", version=f"chute {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (bench, doctor, pack, inspect, cache):
        command.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
