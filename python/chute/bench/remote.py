"""``chute bench --remote``: the same images read locally and from an HTTP server with added latency, in one run.

The generated bench dataset (or ``--root``) is packed into chute shards and written as WebDataset tar
shards; nginx serves both on loopback, behind a proxy of chute's own that adds ``latency_ms`` to every
request (:mod:`chute.testing.loopback`). Rows, interleaved round by round (after one warm-up epoch each,
except the cold rows, which need a cold cache):

- ``chute, local shards``: ``chute.Loader`` over the local packed dataset, ``order="shards"``.
- ``chute, remote, cold cache``: the same loader over the dataset's URL, with a new, empty cache each round:
  the epoch includes opening the dataset (its index is fetched) and fetching every shard. Its first batch's
  latency (from ``chute.open`` to the first batch in hand) is reported.
- ``chute, remote, warm cache``: the same over a cache that already holds every shard.
- ``WebDataset + DataLoader, remote``: ``webdataset.WebDataset`` over the tar shards' URLs (read by its
  ``curl`` pipes), shard shuffle and a 1000-sample shuffle buffer, torchvision's transforms (or chute's PIL
  reference of them), ``DataLoader(num_workers=cores)``: what users of WebDataset run. Left out, with the
  reason, when ``webdataset`` does not import.

Every row runs the training pipeline (``RandomResizedCrop(224)`` + flip, float32 normalised): CPU-bound on
this machine, which is the case the issue's target (remote >= 0.9x local) is about.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import chute
from chute.bench import torch_peer
from chute.bench.harness import Contender, Timing, interleave, time_epoch
from chute.bench.run import available_cores, chute_transforms


@dataclass
class RemoteBench:
    images: int
    latency_ms: float
    shards: int
    shard_bytes: int
    rows: list[Contender]
    first_batch_s: list[float] = field(default_factory=list)  # cold cache: chute.open to the first batch
    notes: list[str] = field(default_factory=list)
    io: dict = field(default_factory=dict)  # the remote loader's I/O figures (last cold round)

    def rate(self, name: str) -> float:
        return next(r.rate for r in self.rows if r.name == name)


def write_webdataset(source: chute.ImageFolder, dst: Path, shard_bytes: int) -> list[Path]:
    """The source's images as WebDataset tar shards (``%08d.jpg`` + ``%08d.cls``), about ``shard_bytes`` each."""
    dst.mkdir(parents=True, exist_ok=True)
    shards: list[Path] = []
    tar, size = None, 0
    for i, (path, label) in enumerate(source.samples):
        if tar is None or size >= shard_bytes:
            if tar is not None:
                tar.close()
            shards.append(dst / f"train-{len(shards):04d}.tar")
            tar, size = tarfile.open(shards[-1], "w", format=tarfile.USTAR_FORMAT), 0
        tar.add(path, arcname=f"{i:08d}.jpg")
        info = tarfile.TarInfo(f"{i:08d}.cls")
        data = str(label).encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        size += os.path.getsize(path) + 1024
    if tar is not None:
        tar.close()
    return shards


def _webdataset_loader(urls: list[str], batch_size: int, workers: int):
    import webdataset as wds

    transform = torch_peer.make_train_transform()
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(transform, int)
    )
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0
    )


def run_remote_bench(
    root: Path,
    *,
    latency_ms: float = 20.0,
    rounds: int = 3,
    batch_size: int = 256,
    threads: int | None = None,
    shard_size: str = "8MB",
    shard_window: int = 8,
    on_step: Callable[[str], None] = lambda _: None,
) -> RemoteBench:
    from chute.testing.loopback import FaultProxy, Nginx

    cores = available_cores()
    threads = threads or cores
    work = Path(tempfile.mkdtemp(prefix="chute-remote-bench-"))
    loaders: list = []
    try:
        source = chute.ImageFolder(root)
        on_step("packing the dataset into shards")
        chute.pack(source, work / "www" / "packed", shard_size=shard_size)
        tars = write_webdataset(source, work / "www" / "tars", chute.packed.parse_size(shard_size))
        shards = [p for p in (work / "www" / "packed").iterdir() if p.suffix != ".chidx"]
        shard_bytes = sum(p.stat().st_size for p in shards) // max(len(shards), 1)

        def loader(dataset) -> chute.Loader:
            made = chute.Loader(
                dataset,
                batch_size,
                shuffle=True,
                order="shards",
                shard_window=shard_window,
                transforms=chute_transforms("train"),
                dtype=torch.float32,
                num_threads=threads,
            )
            loaders.append(made)
            return made

        with Nginx(work / "www") as server_url, FaultProxy(server_url, latency_s=latency_ms / 1e3) as proxy:
            url = f"{proxy.url}/packed/"
            local = loader(chute.open(work / "www" / "packed"))
            warm_cache = work / "warm-cache"
            warm = loader(chute.open(url, cache_dir=warm_cache))
            first_batch: list[float] = []
            io_figures: dict = {}

            def cold() -> Timing:
                cache = Path(tempfile.mkdtemp(prefix="cold-", dir=work))
                try:
                    start = time.perf_counter()
                    dataset = chute.open(url, cache_dir=cache)
                    made = loader(dataset)
                    images = n = 0
                    for batch in made:
                        if n == 0:
                            first_batch.append(time.perf_counter() - start)
                        images += len(batch[1])
                        n += 1
                    seconds = time.perf_counter() - start
                    io_figures.clear()
                    io_figures.update(made.stats().get("remote", {}))
                    made.close()
                    loaders.remove(made)
                    return Timing(images, seconds, n)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)

            rows = [
                Contender("chute, local shards", lambda: time_epoch(local)),
                Contender("chute, remote, cold cache", cold, warm=False),
                Contender("chute, remote, warm cache", lambda: time_epoch(warm)),
            ]
            notes = []
            try:
                wds_loader = _webdataset_loader([f"{proxy.url}/tars/{t.name}" for t in tars], batch_size, cores)
                rows.append(Contender("WebDataset + DataLoader, remote", lambda: time_epoch(wds_loader)))
            except ImportError as e:
                notes.append(f"WebDataset row left out: {e}")
            interleave(rows, rounds=rounds, on_step=on_step)
        return RemoteBench(
            len(source), latency_ms, len(shards), shard_bytes, rows, first_batch, notes, dict(io_figures)
        )
    finally:
        for made in loaders:
            made.close()
        shutil.rmtree(work, ignore_errors=True)
