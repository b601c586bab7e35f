"""The ``chute doctor`` subcommand: argument parsing and printing only; chute.doctor does the work."""

from __future__ import annotations

import argparse
from pathlib import Path

from chute.cli import args as types


def add_parsers(sub) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="find where a training job's input pipeline stalls, and say what to change",
        description="Runs SCRIPT (with its arguments) in this process and watches the first DataLoader or "
        "chute.Loader it iterates (or the loader it passes to chute.doctor.watch): after --warmup + "
        "--steps batches it prints the diagnosis and lets the script go on. With no SCRIPT, it "
        "diagnoses a DataLoader over the generated bench dataset as a demonstration.",
    )
    doctor.add_argument("--report", type=Path, metavar="HTML", help="also write a self-contained HTML report")
    doctor.add_argument(
        "--screenshot",
        type=Path,
        metavar="PNG",
        help="with --report: also render the report to a PNG in headless Chromium",
    )
    doctor.add_argument("--steps", type=types.positive, default=20, help="batches to measure (default 20)")
    doctor.add_argument("--warmup", type=int, default=3, help="batches before measuring (default 3)")
    doctor.add_argument(
        "--max-steps",
        type=types.positive,
        help="measure up to this many batches while the stall's 95%% interval straddles the "
        "input-bound threshold (default 5 x --steps)",
    )
    doctor.add_argument(
        "--sweep",
        action="store_true",
        help="no SCRIPT: also run `chute bench --sweep` (one round) and put its plot in the report",
    )
    doctor.add_argument("script", nargs="?", help="a Python training script")
    doctor.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    doctor.set_defaults(run=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    import warnings

    from rich.console import Console

    from chute.doctor import run_script

    console = Console()
    if args.warmup < 0:
        console.print("chute doctor: --warmup must be >= 0")
        return 2
    if args.sweep and args.script is not None:
        console.print("chute doctor: --sweep goes with the demonstration (no SCRIPT)")
        return 2
    if args.screenshot and not args.report:
        console.print("chute doctor: --screenshot renders the --report; give both")
        return 2
    if args.sweep:
        from chute.doctor.report_html import have_matplotlib

        if not have_matplotlib():  # checked before minutes of measurement, not after
            console.print("chute doctor: --sweep draws a plot with matplotlib: pip install 'chute[plot]'")
            return 2
    if args.script is not None:
        if not Path(args.script).is_file():
            console.print(f"chute doctor: no such script: {args.script}")
            return 2
        found = run_script(
            args.script,
            args.args,
            steps=args.steps,
            warmup=args.warmup,
            max_steps=args.max_steps,
            report=str(args.report) if args.report else None,
        )
        if not found:
            console.print(
                "chute doctor: the script iterated no DataLoader, chute.Loader or chute.ray.RemoteLoader; nothing was measured"
            )
            return 1
        if args.report:
            _shoot(args, console)
        return 0

    from chute.bench import torch_peer
    from chute.bench.dataset import ensure_dataset
    from chute.doctor import doctor

    root = ensure_dataset()
    loader = torch_peer.make_dataloader(root, batch_size=64, num_workers=1, persistent_workers=False)
    console.print(
        f"chute doctor: no script given; diagnosing a DataLoader over {root} as a demonstration "
        "(ImageFolder + PIL transforms, num_workers=1, batch 64)"
    )
    with console.status("measuring"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        d = doctor(loader, steps=args.steps, warmup=args.warmup, max_steps=args.max_steps)
        if args.sweep:
            d.sweep_png = _sweep_png(root)
    d.print(console)
    if args.report:
        d.save_html(args.report)
        _shoot(args, console)
    return 0


def _shoot(args: argparse.Namespace, console) -> None:
    console.print(f"report: {args.report}")
    if args.screenshot:
        from chute.doctor.report_html import screenshot

        screenshot(args.report, args.screenshot)
        console.print(f"screenshot: {args.screenshot}")


def _sweep_png(root: Path) -> bytes:
    import tempfile

    from chute.bench.sweep import plot, run_sweep

    result = run_sweep(root, rounds=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.png"
        plot(result, path)
        return path.read_bytes()
