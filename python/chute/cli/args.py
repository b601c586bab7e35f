"""Argument types of the ``chute`` subcommands: each turns a command-line word into a checked value or says
what was wrong (argparse prints it with the option's name)."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def worker_counts(text: str) -> list[int]:
    """``"0,2,4"`` -> ``[0, 2, 4]``: DataLoader ``num_workers`` values."""
    try:
        workers = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not workers or any(w < 0 for w in workers):
        raise argparse.ArgumentTypeError("worker counts must be >= 0")
    return workers


def size(text: str, *, at_least: int = 1) -> int:
    """A size in bytes: ``1GB``, ``512MB``, ``256MiB``, a plain number."""
    from chute._validate import parse_size

    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value < at_least:
        raise argparse.ArgumentTypeError(
            "must be positive" if at_least == 1 else f"must be at least {at_least} bytes, got {value}"
        )
    return value


def quality(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be in [1, 100], got {value}")
    return value
