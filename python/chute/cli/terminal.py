"""What the subcommands share about the terminal: names printed safely, progress bars, and a data command's
errors said in one line."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable


def printable(name: str) -> str:
    """A file or member name for the terminal: bytes that are not UTF-8 as \\xNN, rich markup escaped."""
    from rich.markup import escape

    return escape(os.fsencode(name).decode("utf-8", "backslashreplace"))


def progress_bar(console, description: str = "{task.description}"):
    """A transient bar: ``description`` (by default each task's own), the count, the task's ``rate`` field
    (give ``rate=""`` to ``add_task``), the time so far and the time left."""
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


def reporting_errors(command: Callable[[argparse.Namespace, object], int]) -> Callable[[argparse.Namespace], int]:
    """``command(args, console)`` run with a console (stderr under ``--json``, so stdout stays JSON); a data or
    I/O error becomes one red line naming the subcommand, and exit status 2."""

    def run(args: argparse.Namespace) -> int:
        from rich.console import Console

        console = Console(stderr=getattr(args, "json", False))
        try:
            return command(args, console)
        except (OSError, ValueError, RuntimeError) as e:
            console.print(f"[red]chute {args.command}: {printable(str(e))}[/red]")
            return 2

    return run
