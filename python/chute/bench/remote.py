"""``chute bench --remote``: the same images read locally and from an HTTP server with added latency, in one run.

The generated bench dataset (or ``--root``) is packed into chute shards and written as WebDataset tar
shards; nginx serves both on loopback, behind a relay of chute's own that adds ``latency_ms`` to every
request (:mod:`chute.bench.loopback`). Rows, interleaved round by round (after one warm-up epoch each,
except the cold rows, which need a cold cache):

- ``chute, local shards``: ``chute.Loader`` over the local packed dataset, ``order="shards"``.
- ``chute, remote, cold cache``: the same loader over the dataset's URL, with a new, empty cache each round:
  the epoch includes opening the dataset (its index is fetched) and fetching every shard. Its first batch's
  latency (from ``chute.open`` to the first batch in hand) is reported.
- ``chute, remote, cold cache, after its first batch``: the same epochs from their first batch on (the
  steady rate of a cold epoch once the start-up, reported apart, is paid; real datasets' epochs are
  made almost entirely of it).
- ``chute, remote, warm cache``: the same over a cache that already holds every shard.
- ``WebDataset + DataLoader, remote``: ``webdataset.WebDataset`` over the tar shards' URLs (read by its
  ``curl`` pipes), shard shuffle and a 1000-sample shuffle buffer, torchvision's transforms (or chute's PIL
  reference of them), ``DataLoader(num_workers=cores)``: what users of WebDataset run. Left out, with the
  reason, when ``webdataset`` does not import.

Every row runs the training pipeline (``RandomResizedCrop(224)`` + flip, float32 normalised): CPU-bound on
this machine, which is the case the issue's target (remote >= 0.9x local) is about. Per core: images per
CPU-second of the benchmark process (nginx and the latency relay run in processes of their own), so the
client-side cost of fetching shows apart from the servers'.
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
from chute._validate import parse_size
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
    # Per cold epoch, CPU seconds spent beside the decode threads, on the same cores: chute's I/O threads
    # (chute-http, chute-fetch, chute-walk), the servers (nginx and the latency relay), and the kernel's
    # writeback of the cache's new files (os.sync() after the epoch, outside its time; system-wide CPU).
    io_threads_cpu_s: list[float] = field(default_factory=list)
    servers_cpu_s: list[float] = field(default_factory=list)
    writeback_cpu_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    io: dict = field(default_factory=dict)  # the remote loader's I/O figures (last cold round)

    def rate(self, name: str) -> float:
        return next(r.rate for r in self.rows if r.name == name)

    @staticmethod
    def per_core(row: Contender) -> float | None:
        """Images per CPU-second of this process (its reader threads; not the servers, not DataLoader
        workers, which are other processes): None where it does not apply."""
        if not row.timings or any(t.cpu_seconds is None for t in row.timings):
            return None
        return row.summarize(lambda t: t.rate_per_cpu_second).median

    def as_dict(self) -> dict:
        local = self.rate("chute, local shards")
        return {
            "images": self.images,
            "latency_ms": self.latency_ms,
            "shards": self.shards,
            "shard_bytes": self.shard_bytes,
            "rows": [
                {
                    "name": r.name,
                    "img_per_s": r.rate,
                    "rates": r.rates,
                    "vs_local": r.rate / local,
                    "img_per_cpu_s": self.per_core(r),
                }
                for r in self.rows
            ],
            "first_batch_s": self.first_batch_s,
            "io_threads_cpu_s": self.io_threads_cpu_s,
            "servers_cpu_s": self.servers_cpu_s,
            "writeback_cpu_s": self.writeback_cpu_s,
            "io": self.io,
            "notes": self.notes,
        }


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


_IO_THREADS = ("chute-http", "chute-fetch", "chute-walk")


def _stat_cpu_s(path: str) -> float:
    """utime + stime of /proc/<pid>[/task/<tid>]/stat, in seconds (0 for one that has gone)."""
    try:
        with open(f"{path}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _io_threads_cpu_s() -> float:
    """CPU seconds so far of this process's live remote-I/O threads (named by chute)."""
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() not in _IO_THREADS:
                    continue
        except FileNotFoundError:
            continue
        total += _stat_cpu_s(f"/proc/self/task/{tid}")
    return total


def _tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds so far of processes `roots` and their live descendants (nginx's workers)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    tree, frontier = set(roots), list(roots)
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(_stat_cpu_s(f"/proc/{pid}") for pid in tree)


def _busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


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
    from chute.bench.loopback import Nginx, RelayProcess

    cores = available_cores()
    threads = threads or cores
    work = Path(tempfile.mkdtemp(prefix="chute-remote-bench-"))
    loaders: list = []
    try:
        source = chute.ImageFolder(root)
        on_step("packing the dataset into shards")
        chute.pack(source, work / "www" / "packed", shard_size=shard_size)
        tars = write_webdataset(source, work / "www" / "tars", parse_size(shard_size))
        os.sync()  # the 2 x dataset just written goes to disk now, not in the kernel's flusher under a timed row
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

        nginx = Nginx(work / "www")
        with nginx as server_url, RelayProcess(server_url, latency_s=latency_ms / 1e3) as proxy:
            url = f"{proxy.url}/packed/"
            local = loader(chute.open(work / "www" / "packed"))
            warm_cache = work / "warm-cache"
            warm = loader(chute.open(url, cache_dir=warm_cache))
            on_step("filling the warm cache")
            for _ in warm:  # its fill is written back before any row is timed
                pass
            os.sync()
            first_batch: list[float] = []
            io_figures: dict = {}
            io_threads_cpu: list[float] = []
            servers_cpu: list[float] = []
            writeback_cpu: list[float] = []

            def servers() -> float:
                return _tree_cpu_s([pid for pid in (nginx.pid, proxy.pid) if pid is not None])

            def cold() -> Timing:
                cache = Path(tempfile.mkdtemp(prefix="cold-", dir=work))
                made: list[chute.Loader] = []

                def epoch():  # the timed pass opens the dataset (its index is fetched) and fetches every shard
                    made.append(loader(chute.open(url, cache_dir=cache)))
                    yield from made[0]

                try:
                    servers0, io0 = servers(), _io_threads_cpu_s()
                    timing = time_epoch(epoch(), cpu_clock=time.process_time)
                    servers_cpu.append(servers() - servers0)
                    io_threads_cpu.append(_io_threads_cpu_s() - io0)  # its dataset's threads are still alive
                    first_batch.append(timing.first.seconds)
                    steady.timings.append(timing.after_first())
                    io_figures.clear()
                    io_figures.update(made[0].stats().get("remote", {}))
                    _close(made)
                    # The cache's new files are written back now, outside the epoch's time, so that no
                    # other row pays for them; the CPU that takes is reported beside the epoch.
                    busy0 = _busy_cpu_s()
                    os.sync()
                    writeback_cpu.append(_busy_cpu_s() - busy0)
                    return timing
                finally:
                    _close(made)
                    shutil.rmtree(cache, ignore_errors=True)

            def _close(made: list[chute.Loader]) -> None:
                while made:
                    m = made.pop()
                    m.close()
                    loaders.remove(m)

            # The cold epochs from their first batch on: the rate once the start-up (the index, the first
            # window of shards) is paid, which an epoch of a real dataset is made of.
            steady = Contender("chute, remote, cold cache, after its first batch", lambda: Timing(0, 1.0))
            rows = [
                Contender("chute, local shards", lambda: time_epoch(local, cpu_clock=time.process_time)),
                Contender("chute, remote, cold cache", cold, warm=False),
                Contender("chute, remote, warm cache", lambda: time_epoch(warm, cpu_clock=time.process_time)),
            ]
            notes = []
            try:
                wds_loader = _webdataset_loader([f"{proxy.url}/tars/{t.name}" for t in tars], batch_size, cores)
                rows.append(Contender("WebDataset + DataLoader, remote", lambda: time_epoch(wds_loader)))
            except ImportError as e:
                notes.append(f"WebDataset row left out: {e}")
            interleave(rows, rounds=rounds, on_step=on_step)
            rows.insert(2, steady)
        return RemoteBench(
            len(source),
            latency_ms,
            len(shards),
            shard_bytes,
            rows,
            first_batch,
            io_threads_cpu,
            servers_cpu,
            writeback_cpu,
            notes,
            dict(io_figures),
        )
    finally:
        for made in loaders:
            made.close()
        shutil.rmtree(work, ignore_errors=True)
