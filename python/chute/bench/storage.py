"""``chute bench --sweep-storage``: what storing or decoding less buys, measured in one run over the same photos.

Rows (each a way to feed the same images):

- ``originals``: the JPEG files as they are (ImageFolder), ``decode='exact'``.
- ``pack --max-side N`` (512, 320, 256): ``chute pack SRC DST --max-side N``, images resized (PIL-exact)
  before they are stored.
- ``pack --max-side 256 --raw``: the same, stored as uint8 pixels (no decode when read).
- ``originals, decode='reduced'``: the JPEG files, decoded at 1/2, 1/4 or 1/8 scale where the resize
  leaves at least ``reducing_gap`` (docs/DECODE.md).
- ``ffcv max_resolution=256`` (optional): FFCV's writer and its standard pipeline, run by a Python that has
  ffcv installed (``ffcv_python``; chute/bench/ffcv_peer.py).

For each row:

- **img/s** and **img/s per core**: images the consumer receives per second, and per CPU-second of the
  loading process (its threads' CPU time: the per-core rate, which holds on a machine whose cores other
  work shares too), with the pipeline measured (default: training, ``RandomResizedCrop(224)`` + flip,
  uint8 out). Median of ``rounds`` epochs after a warm-up epoch, rows interleaved round by round, hot page
  cache.
- **bytes**: the bytes of the files the row reads (the image files, or every file of the pack).
- **pixel error** against the exact pipeline on the originals: the evaluation transforms
  ``Resize(256)`` + ``CenterCrop(224)`` (no random draw, so each sample's output is defined whatever
  was stored), uint8, in the source's order; for every channel value of every sample,
  ``|row - exact originals|``: its mean (MAE), 99th percentile and maximum, and how many images are not
  bit-identical.

A row whose pack fails (e.g. a chute without ``--max-side``) is reported as unavailable with the reason,
and the rest of the sweep runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import chute
from chute.bench.harness import Contender, Rated, Summary, Timing, interleave, time_epoch
from chute.bench.run import available_cores

EVAL_TRANSFORMS = (("Resize", 256), ("CenterCrop", 224))
PACK_ROWS = (
    ("pack --max-side 512", ["--max-side", "512"]),
    ("pack --max-side 320", ["--max-side", "320"]),
    ("pack --max-side 256", ["--max-side", "256"]),
    ("pack --max-side 256 --raw", ["--max-side", "256", "--raw"]),
)


def eval_transforms() -> list:
    return [chute.Resize(256), chute.CenterCrop(224)]


def throughput_transforms(pipeline: str) -> list:
    if pipeline == "train":
        return [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()]
    return eval_transforms()


@dataclass
class PixelError:
    """|a - b| over every channel value of every image compared."""

    mae: float
    p99: int
    max: int
    images: int
    changed: int  # images that are not bit-identical


class ErrorHistogram:
    """Accumulates |a - b| of uint8 batches (N, ...) as a histogram, so that the percentile is exact."""

    def __init__(self) -> None:
        self.counts = np.zeros(256, dtype=np.int64)
        self.images = 0
        self.changed = 0

    def add(self, a, b) -> None:
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != np.uint8 or b.dtype != np.uint8:
            raise ValueError(f"compare uint8 batches of one shape, got {a.dtype}{a.shape} and {b.dtype}{b.shape}")
        d = np.abs(a.astype(np.int16) - b.astype(np.int16)).astype(np.uint8)
        self.counts += np.bincount(d.ravel(), minlength=256)
        self.images += len(d)
        self.changed += int(np.count_nonzero(d.reshape(len(d), -1).max(axis=1)))

    def result(self) -> PixelError:
        total = int(self.counts.sum())
        if total == 0:
            raise ValueError("nothing was compared")
        values = np.arange(256)
        mae = float((self.counts * values).sum() / total)
        cumulative = np.cumsum(self.counts)
        p99 = int(np.searchsorted(cumulative, 0.99 * total))  # the smallest v with P(|d| <= v) >= 0.99
        return PixelError(mae, p99, int(values[self.counts > 0].max()), self.images, self.changed)


def hwc(batch: torch.Tensor) -> np.ndarray:
    """A uint8 NCHW batch as NHWC numpy."""
    return batch.permute(0, 2, 3, 1).contiguous().numpy()


def outputs(source, transforms: list, batch_size: int, **loader_kwargs) -> Iterable[tuple[np.ndarray, torch.Tensor]]:
    """One epoch's uint8 outputs (NHWC) and labels, in the source's order (seed 0: random transforms draw
    the same parameters for the same sample whatever the decode)."""
    loader = chute.Loader(source, batch_size, shuffle=False, seed=0, transforms=transforms, **loader_kwargs)
    try:
        for x, y in loader:
            yield hwc(x), y.clone()
    finally:
        loader.close()


def eval_outputs(source, batch_size: int, **loader_kwargs) -> Iterable[tuple[np.ndarray, torch.Tensor]]:
    """The evaluation pipeline's outputs, the reference the sweep compares every row with."""
    return outputs(source, eval_transforms(), batch_size, **loader_kwargs)


def compare(
    reference: Iterable[tuple[np.ndarray, torch.Tensor]], candidate: Iterable[tuple[np.ndarray, torch.Tensor]]
) -> PixelError:
    """Sample by sample, batches of the same samples in the same order (the labels must agree)."""
    hist = ErrorHistogram()
    ref_iter, cand_iter = iter(reference), iter(candidate)
    while True:
        a, b = next(ref_iter, None), next(cand_iter, None)
        if a is None or b is None:
            if a is not None or b is not None:
                raise ValueError("the two sources hold different numbers of samples")
            return hist.result()
        if not torch.equal(a[1], b[1]):
            raise ValueError("the two sources disagree on the labels: not the same samples in the same order")
        hist.add(a[0], b[0])


def interleaved_rates(loaders: dict, rounds: int, on_step: Callable[[str], None] = lambda _: None) -> dict:
    """A warm-up epoch of each, then ``rounds`` rounds of one epoch each, alternating (harness.interleave),
    timing wall and CPU seconds (this process's: chute's threads run in it): a Contender per loader."""
    contenders = [
        Contender(name, lambda loader=loader: time_epoch(loader, cpu_clock=time.process_time))
        for name, loader in loaders.items()
    ]
    interleave(contenders, rounds=rounds, on_step=on_step)
    return {c.name: c for c in contenders}


def tree_bytes(path: Path) -> int:
    """Bytes of every file below ``path`` (or of the file)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass
class Row(Rated):
    name: str
    threads: int = 0
    bytes: int | None = None
    timings: list[Timing] = field(default_factory=list)  # one per timed epoch
    error: PixelError | None = None
    unavailable: str | None = None  # why the row could not run
    note: str = ""

    @property
    def rates(self) -> list[float]:
        """Images per second the consumer received, per epoch (``rate``: their median)."""
        return [t.rate for t in self.timings]

    @property
    def cpu_rates(self) -> list[float]:
        """Images per CPU-second of the loading process, per epoch."""
        return [t.rate_per_cpu_second for t in self.timings]

    @property
    def per_core(self) -> float:
        """Images per CPU-second: what one core gives, measured from this process's CPU time."""
        return Summary.of(self.cpu_rates).median

    def to_json(self) -> dict:
        ran = bool(self.timings)
        return {
            "name": self.name,
            "threads": self.threads,
            "bytes": self.bytes,
            "rates": self.rates,
            "cpu_rates": self.cpu_rates,
            "img_per_s": self.rate if ran else None,
            "img_per_cpu_s": self.per_core if ran else None,
            "error": None if self.error is None else vars(self.error),
            "unavailable": self.unavailable,
            "note": self.note,
        }


@dataclass
class StorageSweep:
    root: str
    images: int
    pipeline: str
    batch_size: int
    threads: int
    rounds: int
    reducing_gap: float
    rows: list[Row]

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def to_json(self) -> dict:
        return {
            "root": self.root,
            "images": self.images,
            "pipeline": self.pipeline,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "rounds": self.rounds,
            "reducing_gap": self.reducing_gap,
            "rows": [r.to_json() for r in self.rows],
        }


def pack_with_cli(src: Path, dst: Path, flags: list[str], threads: int) -> str | None:
    """Runs ``chute pack SRC DST FLAGS``; returns None, or why it failed (its last line of output)."""
    command = [sys.executable, "-m", "chute.cli", "pack", str(src), str(dst), "--threads", str(threads), *flags]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"chute pack exited with status {done.returncode}"


def run_storage_sweep(
    root: Path,
    *,
    pipeline: str = "train",
    batch_size: int = 128,
    rounds: int = 3,
    threads: int | None = None,
    reducing_gap: float = 3.0,
    images: int | None = None,
    work_dir: Path | None = None,
    pack_rows: tuple[tuple[str, list[str]], ...] = PACK_ROWS,
    ffcv_python: str | None = None,
    on_step: Callable[[str], None] = lambda _: None,
) -> StorageSweep:
    """Builds each row's source (packs into a temporary directory, removed at the end), measures the
    pixel error of each against the exact originals, then the throughput of all, interleaved. With
    ``images``, only the first that many photos of the ImageFolder ``root`` (as a file list)."""
    threads = threads or available_cores()
    root = Path(root)
    samples = chute.ImageFolder(root).samples
    if images is not None:
        if not 1 <= images <= len(samples):
            raise ValueError(f"images must be in [1, {len(samples)}] (the photos in {root}), got {images}")
        samples = samples[:images]
    loader_kwargs = {"num_threads": threads, "prefetch": 2}
    rows = [Row("originals", threads, sum(os.path.getsize(p) for p, _ in samples))]
    tmp = Path(tempfile.mkdtemp(prefix=".chute-sweep-storage-", dir=work_dir or root.parent))
    try:
        pack_src = root
        if images is None:
            originals = chute.ImageFolder(root)
        else:  # the subset, as a file list that chute pack reads too
            pack_src = tmp / "originals.txt"
            pack_src.write_text("".join(f"{os.fsdecode(p)} {label}\n" for p, label in samples))
            originals = chute.FileList(pack_src)
        sources = {"originals": (originals, "exact")}
        for name, flags in pack_rows:
            on_step(f"packing: {name}")
            dst = tmp / name.replace(" ", "_").replace("-", "")
            reason = pack_with_cli(pack_src, dst, flags, threads)
            if reason is None:
                try:
                    packed = chute.open(dst)
                except (OSError, ValueError, RuntimeError) as e:  # reported, not fatal to the sweep
                    reason = f"chute.open: {e}"
                else:
                    if len(packed) != len(originals):
                        reason = f"the pack holds {len(packed)} samples, the originals {len(originals)}"
            if reason is not None:
                rows.append(Row(name, unavailable=reason))
                continue
            rows.append(Row(name, threads, tree_bytes(dst)))
            sources[name] = (packed, "exact")
        reduced = f"originals, decode='reduced' (gap {reducing_gap:g})"
        rows.append(Row(reduced, threads, rows[0].bytes))
        sources[reduced] = (originals, "reduced")

        def row_outputs(name: str):
            source, decode = sources[name]
            return eval_outputs(source, batch_size, decode=decode, reducing_gap=reducing_gap, **loader_kwargs)

        for row in rows:
            if row.unavailable is None:
                on_step(f"pixel error: {row.name}")
                row.error = compare(row_outputs("originals"), row_outputs(row.name))

        loaders = {
            name: chute.Loader(
                source,
                batch_size,
                shuffle=True,
                seed=0,
                transforms=throughput_transforms(pipeline),
                decode=decode,
                reducing_gap=reducing_gap,
                **loader_kwargs,
            )
            for name, (source, decode) in sources.items()
        }
        try:
            for name, contender in interleaved_rates(loaders, rounds, on_step).items():
                next(r for r in rows if r.name == name).timings = contender.timings
        finally:
            for loader in loaders.values():
                loader.close()

        rows.append(_ffcv_row(samples, tmp, ffcv_python, pipeline, batch_size, rounds, threads, originals, on_step))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return StorageSweep(str(root), len(samples), pipeline, batch_size, threads, rounds, reducing_gap, rows)


FFCV_NAME = "ffcv max_resolution=256 (jpg q90)"


def _ffcv_row(
    samples: list,
    tmp: Path,
    ffcv_python: str | None,
    pipeline: str,
    batch_size: int,
    rounds: int,
    threads: int,
    originals,
    on_step,
) -> Row:
    """FFCV, through a Python that has it (its own process, after chute's rows: not interleaved)."""
    if ffcv_python is None:
        return Row(FFCV_NAME, unavailable="no --ffcv-python given (a Python with ffcv installed; see docs/DECODE.md)")
    on_step("ffcv: write, warm-up and timed epochs")
    script = Path(__file__).with_name("ffcv_peer.py")
    beton, out, listing = tmp / "ffcv.beton", tmp / "ffcv_eval.npy", tmp / "ffcv_samples.json"
    listing.write_text(json.dumps([[os.fsdecode(p), int(label)] for p, label in samples]))
    command = [
        ffcv_python,
        str(script),
        "--samples",
        str(listing),
        "--beton",
        str(beton),
        "--eval-out",
        str(out),
        "--pipeline",
        pipeline,
        "--batch-size",
        str(batch_size),
        "--rounds",
        str(rounds),
        "--threads",
        str(threads),
        "--max-resolution",
        "256",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as e:  # no such interpreter, not executable
        return Row(FFCV_NAME, unavailable=f"--ffcv-python {ffcv_python}: {e.strerror or e}")
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return Row(FFCV_NAME, unavailable=lines[-1] if lines else f"exited with status {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    row = Row(
        FFCV_NAME,
        threads,
        result["bytes"],
        [Timing(**epoch) for epoch in result["epochs"]],
        note="FFCV's own process, after chute's rows (not interleaved); eval: its CenterCrop decoder "
        "(ratio 224/256, OpenCV INTER_AREA)",
    )
    ffcv_eval = np.load(out, mmap_mode="r")
    labels = np.asarray(result["eval_labels"])

    def ffcv_batches():
        for start in range(0, len(ffcv_eval), batch_size):
            yield (
                np.asarray(ffcv_eval[start : start + batch_size]),
                torch.from_numpy(labels[start : start + batch_size]),
            )

    on_step("pixel error: ffcv")
    row.error = compare(eval_outputs(originals, batch_size, num_threads=threads), ffcv_batches())
    return row


def plot(result: StorageSweep, path: Path) -> None:
    """Throughput per core against pixel error (MAE), one labelled point per row; needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    shown = [row for row in result.rows if row.unavailable is None and row.error is not None]
    for i, row in enumerate(shown):
        ax.scatter(row.error.mae, row.per_core, s=40)
        label = f"{row.name}, {row.bytes / 1e6:,.1f} MB" if row.bytes else row.name
        # Rows at the same point (the originals and decode='reduced' on small photos) get their labels stacked.
        ax.annotate(
            label, (row.error.mae, row.per_core), textcoords="offset points", xytext=(6, 4 - 10 * (i % 3)), fontsize=7
        )
    ax.set_xlabel("pixel error against exact decoding of the originals (MAE, Resize(256)+CenterCrop(224), uint8)")
    ax.set_ylabel(f"images per CPU-second, per core ({result.pipeline} pipeline)")
    ax.set_ylim(bottom=0)
    right = max((row.error.mae for row in shown), default=1.0) or 1.0
    ax.set_xlim(-0.05 * right, 1.45 * right)  # room for the labels on the right
    ax.set_title(
        f"chute bench --sweep-storage: {result.images} images, {result.threads} threads, "
        f"median of {result.rounds} epochs"
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
