"""``chute bench --sweep``: the grid users search by hand, measured in one run.

The PyTorch DataLoader over ``num_workers`` in {0, 1, ..., cores, 2 x cores} x ``pin_memory`` x
``prefetch_factor`` in {2, 4} (``persistent_workers`` on), and chute over the same thread counts x
``prefetch`` in {2, 4} with fixed settings, then chute's auto mode. Each configuration gets its own loader, a
warm-up epoch and ``rounds`` timed epochs (median). The knee of each family is the fewest workers or
threads within 95% of its best rate. Finally the best manual chute configuration and auto mode run again,
interleaved round by round, for the comparison the sweep exists to make: does auto mode find the knee?

With ``consumer_ms``, the consumer is a simulated training step that sleeps that long per batch. Auto mode
should then use fewer threads than the fixed setting; the sweep reports the threads each ends with and the
CPU time the process spent per image (chute's threads run in this process; the sleeping consumer uses none).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import chute
from chute.bench import torch_peer
from chute.bench.harness import Contender, Rated, Summary, Timing, interleave, time_epoch
from chute.bench.run import available_cores, chute_transforms

KNEE_FRACTION = 0.95


@dataclass
class Config(Rated):
    family: str  # "dataloader" or "chute"
    workers: int | str  # DataLoader num_workers or chute num_threads ("auto")
    pin_memory: bool | None = None
    prefetch: int | str | None = None  # prefetch_factor (DataLoader) or prefetch (chute)
    rates: list[float] = field(default_factory=list)
    cpu_per_image_ms: list[float] = field(default_factory=list)
    active_threads: int | None = None  # chute: threads working at the end

    @property
    def name(self) -> str:
        if self.family == "chute":
            return f"chute threads={self.workers} prefetch={self.prefetch}"
        extra = "" if self.prefetch is None else f" prefetch_factor={self.prefetch}"
        return f"DataLoader workers={self.workers} pin_memory={self.pin_memory}{extra}"


@dataclass
class SweepResult:
    pipeline: str
    images: int
    batch_size: int
    cores: int
    consumer_ms: float
    configs: list[Config]
    best_manual: Config
    auto: Config
    head_to_head: dict  # interleaved rounds: best manual chute vs auto

    def families(self) -> list[str]:
        return [f for f in ("dataloader", "chute") if any(c.family == f for c in self.configs)]

    def best(self, family: str) -> Config:
        return max((c for c in self.configs if c.family == family and c.workers != "auto"), key=lambda c: c.rate)

    def knee(self, family: str) -> int:
        """The fewest workers (threads) whose best configuration reaches 95% of the family's best rate."""
        best = self.best(family).rate
        counts = sorted({c.workers for c in self.configs if c.family == family and c.workers != "auto"})
        for w in counts:
            if max(c.rate for c in self.configs if c.family == family and c.workers == w) >= KNEE_FRACTION * best:
                return w
        return counts[-1]

    def auto_ratio(self) -> float:
        h = self.head_to_head
        return h["auto"] / h["manual"] if h["manual"] else float("nan")

    def to_json(self) -> dict:
        return {
            "pipeline": self.pipeline,
            "images": self.images,
            "batch_size": self.batch_size,
            "cores": self.cores,
            "consumer_ms": self.consumer_ms,
            "configs": [asdict(c) | {"name": c.name, "img_per_s": c.rate} for c in self.configs],
            "knee": {f: self.knee(f) for f in self.families()},
            "best": {f: self.best(f).name for f in self.families()},
            "head_to_head": self.head_to_head,
            "auto_vs_best_manual": self.auto_ratio(),
        }


def worker_counts(cores: int) -> list[int]:
    return sorted(set(range(cores + 1)) | {2 * cores})


def grid(cores: int) -> list[Config]:
    configs = []
    for w in worker_counts(cores):
        for pin in (False, True):
            for pf in (None,) if w == 0 else (2, 4):
                configs.append(Config("dataloader", w, pin, pf))
    for t in worker_counts(cores):
        if t == 0:
            continue
        for pf in (2, 4):
            configs.append(Config("chute", t, None, pf))
    configs.append(Config("chute", "auto", None, "auto"))
    return configs


def _epoch(loader, consumer_s: float) -> Timing:
    """One epoch as the consumer receives it (sleeping ``consumer_s`` per batch), with this process's CPU
    time (chute's threads run in this process; the sleeping consumer uses none)."""
    step = (lambda _: time.sleep(consumer_s)) if consumer_s else None
    return time_epoch(loader, on_batch=step, cpu_clock=time.process_time)


def _make(config: Config, root: Path, source: chute.ImageFolder, pipeline: str, batch_size: int):
    if config.family == "dataloader":
        return torch_peer.make_dataloader(
            root,
            batch_size=batch_size,
            num_workers=config.workers,
            prefetch_factor=config.prefetch or 2,
            pin_memory=config.pin_memory,
            persistent_workers=True,
            train=pipeline == "train",
        )
    return chute.Loader(
        source,
        batch_size,
        shuffle=True,
        transforms=chute_transforms(pipeline),
        dtype=torch.float32,
        num_threads=config.workers,
        prefetch=config.prefetch,
    )


def _close(loader) -> None:
    if isinstance(loader, chute.Loader):
        loader.close()
        return
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()


def _measure(
    pairs: list[tuple[Config, object]], rounds: int, consumer_s: float, on_step: Callable[[str], None]
) -> None:
    """A warm-up epoch of each loader, then ``rounds`` timed epochs of each, interleaved; the rates (and for
    chute, CPU ms per image and the threads working at the end) go to their configurations."""
    contenders = [Contender(c.name, lambda loader=loader: _epoch(loader, consumer_s)) for c, loader in pairs]
    interleave(contenders, rounds=rounds, on_step=on_step)
    for (config, loader), c in zip(pairs, contenders):
        config.rates.extend(c.rates)
        if config.family == "chute":  # the DataLoader's workers are other processes: not comparable
            config.cpu_per_image_ms.extend(1e3 * t.cpu_seconds / max(t.items, 1) for t in c.timings)
            config.active_threads = loader.active_threads


def run_sweep(
    root: Path,
    *,
    pipeline: str = "train",
    batch_size: int = 256,
    rounds: int = 3,
    consumer_ms: float = 0.0,
    families: tuple[str, ...] = ("dataloader", "chute"),
    on_step: Callable[[str], None] = lambda _: None,
) -> SweepResult:
    """Measures every configuration of the grid (each: a warm-up epoch, then `rounds` timed ones), then
    the best manual chute configuration against auto mode, interleaved."""
    cores = available_cores()
    source = chute.ImageFolder(root)
    consumer_s = consumer_ms / 1e3
    configs = [c for c in grid(cores) if c.family in families]
    for config in configs:
        loader = _make(config, root, source, pipeline, batch_size)
        try:
            _measure([(config, loader)], rounds, consumer_s, on_step)
        finally:
            _close(loader)
    chute_configs = [c for c in configs if c.family == "chute"]
    auto = next(c for c in chute_configs if c.workers == "auto")
    manual = max((c for c in chute_configs if c.workers != "auto"), key=lambda c: c.rate)

    # Head to head, interleaved: the two loaders live side by side and alternate epochs.
    pair = {
        "manual": Config("chute", manual.workers, None, manual.prefetch),
        "auto": Config("chute", "auto", None, "auto"),
    }
    loaders = {k: _make(c, root, source, pipeline, batch_size) for k, c in pair.items()}
    try:
        _measure([(pair[k], loaders[k]) for k in pair], rounds, consumer_s, lambda s: on_step(f"head to head: {s}"))
    finally:
        for loader in loaders.values():
            _close(loader)
    head_to_head = {
        "manual_config": manual.name,
        "manual": pair["manual"].rate,
        "auto": pair["auto"].rate,
        "manual_rates": pair["manual"].rates,
        "auto_rates": pair["auto"].rates,
        "manual_cpu_ms_per_image": Summary.of(pair["manual"].cpu_per_image_ms).median,
        "auto_cpu_ms_per_image": Summary.of(pair["auto"].cpu_per_image_ms).median,
        "manual_threads": pair["manual"].active_threads,
        "auto_active_threads": pair["auto"].active_threads,
    }
    return SweepResult(pipeline, len(source), batch_size, cores, consumer_ms, configs, manual, auto, head_to_head)


def plot(result: SweepResult, path: Path) -> None:
    """Throughput against workers (threads), one line per family and setting; needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 5))
    lines: dict[str, list[tuple[int, float]]] = {}
    for c in result.configs:
        if c.workers == "auto":
            continue
        if c.family == "dataloader":
            label = f"DataLoader pin_memory={c.pin_memory}" + (f" prefetch_factor={c.prefetch}" if c.prefetch else "")
            if c.workers == 0:  # no prefetch_factor without workers: the point starts both lines
                for pf in (2, 4):
                    lines.setdefault(f"DataLoader pin_memory={c.pin_memory} prefetch_factor={pf}", []).append(
                        (0, c.rate)
                    )
                continue
        else:
            label = f"chute prefetch={c.prefetch}"
        lines.setdefault(label, []).append((c.workers, c.rate))
    for label, points in sorted(lines.items()):
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            label=label,
            linestyle="-" if label.startswith("chute") else "--",
        )
    ax.axhline(result.auto.rate, color="green", linewidth=2, label=f"chute auto ({result.auto.rate:,.0f} img/s)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("num_workers (DataLoader) / num_threads (chute)")
    ax.set_ylabel("images/s received by the consumer")
    title = f"{result.pipeline} pipeline, {result.images} images, batch {result.batch_size}, {result.cores} cores"
    if result.consumer_ms:
        title += f", consumer step {result.consumer_ms:g} ms"
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
