"""The measurements behind ``chute bench``: chute and the PyTorch DataLoader over the same images, in one
run, on the same cores, interleaved round by round.

Every figure is images per second received by the consumer over one whole epoch, timed from ``iter()``
to the last batch, after one untimed warm-up epoch (which pays for worker start-up and fills the page
cache: the figures are hot-cache). Loaders persist across epochs, as ``persistent_workers=True`` does.
The median over rounds is reported, with the range: on a shared machine single epochs vary, and chute's
first timed epoch can pay page faults when the kernel has reclaimed its idle batch buffers while the
DataLoader ran (seen on this workplace's machines, which run proactive memory reclaim).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import chute
from chute import remote
from chute._native import available_cores  # affinity within the cgroup's CPU quota (chute/cores.h)
from chute.bench import torch_peer
from chute.bench.harness import Contender, Rated, Timing, interleave, time_epoch


@dataclass
class Measurement(Rated):
    name: str
    kind: str  # "chute", "dataloader" or "reference"
    cores: int  # cores the configuration may use: threads or worker processes, at most the machine's
    rates: list[float] = field(default_factory=list)

    @property
    def per_core(self) -> float:
        return self.rate / self.cores


@dataclass
class BenchResult:
    pipeline: str
    images: int
    batch_size: int
    cores: int
    peer: str  # "torchvision" or "PIL re-implementation of torchvision"
    measurements: list[Measurement]

    def best_dataloader(self) -> Measurement:
        return max((m for m in self.measurements if m.kind == "dataloader"), key=lambda m: m.rate)

    def ratio(self, m: Measurement) -> float:
        best = self.best_dataloader().rate
        return m.rate / best if best else float("nan")


def chute_transforms(pipeline: str) -> list:
    normalize = chute.Normalize(torch_peer.IMAGENET_MEAN, torch_peer.IMAGENET_STD)
    if pipeline == "train":
        return [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(), normalize]
    return [chute.Resize(256), chute.CenterCrop(224), normalize]


def run_bench(
    root: Path,
    *,
    pipeline: str = "train",
    batch_size: int = 256,
    rounds: int = 3,
    workers: list[int] | None = None,
    threads: int | None = None,
    packed_path: str | None = None,
    on_step: Callable[[str], None] = lambda _: None,
) -> BenchResult:
    """Measures chute, the DataLoader at each worker count, and single-thread decoding, interleaved.
    With ``packed_path`` (a packed dataset or tar shards of the same images), chute also runs on it, and both
    sources are read without decoding (``read:`` rows, kind "read": the storage layer alone)."""
    cores = available_cores()
    workers = list(range(cores + 1)) if workers is None else workers
    threads = threads or cores
    train = pipeline == "train"
    source = chute.ImageFolder(root)
    paths = [p for p, _ in source.samples]

    loaders: list[tuple[Measurement, Iterable]] = []
    ours = chute.Loader(
        source,
        batch_size,
        shuffle=True,
        transforms=chute_transforms(pipeline),
        dtype=torch.float32,
        num_threads=threads,
    )
    loaders.append((Measurement(f"chute {threads} threads", "chute", min(threads, cores)), ours))
    reads: list[tuple[Measurement, object]] = []
    if packed_path is not None:
        packed = chute.open(packed_path)
        if len(packed) != len(source):
            raise ValueError(f"{packed_path} holds {len(packed)} samples, {root} {len(source)}: pack the same images")
        loaders.append(
            (
                Measurement(f"chute {threads} threads, {type(packed).__name__}", "chute", min(threads, cores)),
                chute.Loader(
                    packed,
                    batch_size,
                    shuffle=True,
                    order="shards" if remote.is_url(packed_path) else "sample",
                    transforms=chute_transforms(pipeline),
                    dtype=torch.float32,
                    num_threads=threads,
                ),
            )
        )
        reads = [
            (Measurement(f"read: ImageFolder, {threads} threads", "read", min(threads, cores)), source._native),
            (
                Measurement(f"read: {type(packed).__name__}, {threads} threads", "read", min(threads, cores)),
                packed._native,
            ),
        ]
    for w in workers:
        dl = torch_peer.make_dataloader(root, batch_size=batch_size, num_workers=w, train=train)
        loaders.append((Measurement(f"DataLoader workers={w}", "dataloader", max(1, min(w, cores))), dl))
    # Single-thread libjpeg-turbo: whole images, each RandomResizedCrop box (crop-on-decode alone), and for
    # eval the window Resize(256) + CenterCrop(224) plans (the loader's own decode, without resampling).
    references = [
        (Measurement("ref: full decode", "reference", 1), {}),
        (Measurement("ref: crop-on-decode", "reference", 1), {"crop": chute.RandomResizedCrop(224)._to_native()}),
    ]
    if not train:
        window = [t._to_native() for t in chute_transforms(pipeline)[:2]]
        references.append((Measurement("ref: eval-window decode", "reference", 1), {"transforms": window}))

    contenders = [Contender(m.name, lambda loader=loader: time_epoch(loader)) for m, loader in loaders]
    # The references and reads need no warm-up: the loaders' warm-up epochs have filled the page cache.
    contenders += [
        Contender(
            m.name,
            lambda keep=keep: Timing.of_rate(chute._native.decode_rate(paths, min_seconds=1.0, **keep)[0]),
            warm=False,
        )
        for m, keep in references
    ]

    def read(native) -> Timing:
        seconds, _, failed = chute._native.read_all(native, threads)
        return Timing(len(source) - failed, seconds)

    contenders += [Contender(m.name, lambda native=native: read(native), warm=False) for m, native in reads]
    measurements = [m for m, _ in loaders] + [m for m, _ in references] + [m for m, _ in reads]
    try:
        interleave(contenders, rounds=rounds, on_step=on_step)
    finally:
        for _, loader in loaders:
            if isinstance(loader, chute.Loader):
                loader.close()
        for _, loader in loaders:
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None:
                iterator._shutdown_workers()
    peer = "torchvision" if torch_peer.uses_torchvision() else "PIL re-implementation of torchvision"
    for m, c in zip(measurements, contenders):
        m.rates = c.rates
    return BenchResult(pipeline, len(source), batch_size, cores, peer, measurements)
