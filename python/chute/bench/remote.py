"""``chute bench --remote``: the same images read locally and from an HTTP server with added latency, in one run.

The generated bench dataset (or ``--root``) is packed into chute shards and written as WebDataset tar
shards with their indexes (``<tar>.chidx``, as ``chute index`` writes them, uploaded beside the tars); nginx
serves both on loopback, behind a relay of chute's own that adds ``latency_ms`` to every request
(:mod:`chute.bench.loopback`). Rows, interleaved round by round (after one warm-up epoch each, except the cold
rows, which need a cold start), for packed shards and for tar shards alike:

- ``chute, local <kind>``: ``chute.Loader`` over the local dataset, ``order="shards"``.
- ``chute, remote <kind>, cold``: the same loader over the dataset's URL, opened anew each round with a new,
  empty disk cache (``cache="disk"``, the default): the epoch includes ``chute.open`` (the index, or the
  tars' indexes, fetched) and receiving every shard. Its first batch's latency (from ``chute.open`` to the
  first batch in hand) and the share of the dataset fetched by then are reported.
- ``chute, remote <kind>, cold, after its first batch``: the same epochs from their first batch on (the
  steady rate of a cold epoch once the start-up, reported apart, is paid).
- ``chute, remote shards, cold, cache='none'``: the same with ``cache="none"`` (nothing written to disk): what
  every epoch costs without the disk cache, beside what the first costs with it (the default's reason).
- ``chute, remote shards, warm disk cache``: packed shards read back from a disk cache that holds them all.
- ``WebDataset + DataLoader, remote``: ``webdataset.WebDataset`` over the tar shards' URLs (read by its
  ``curl`` pipes), shard shuffle and a 1000-sample shuffle buffer, torchvision's transforms (or chute's PIL
  reference of them), ``DataLoader(num_workers=cores)``: what users of WebDataset run. Left out, with the
  reason, when ``webdataset`` does not import.

Every row runs the training pipeline (``RandomResizedCrop(224)`` + flip, float32 normalised): CPU-bound on
this machine, which is the case the target (remote >= 0.9x local) is about. Per core: images per
CPU-second of the benchmark process (nginx and the latency relay run in processes of their own), so the
client-side cost of fetching shows apart from the servers'; each cold epoch's CPU is also split by thread
(chute's I/O threads by name, the decode workers) and the servers'. After the timed rounds, one more
(untimed) epoch of each remote dataset is compared batch by batch with the local one's.
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

KINDS = ("shards", "tars")


@dataclass
class RemoteBench:
    images: int
    latency_ms: float
    shards: int
    shard_bytes: int
    rows: list[Contender]
    # Per kind ("shards", "tars", and "shards, cache=none" for the cold epochs without the disk cache), per cold epoch: chute.open to the first batch, and the share of the dataset's
    # bytes received by then.
    first_batch_s: dict[str, list[float]] = field(default_factory=dict)
    first_batch_fetched: dict[str, list[float]] = field(default_factory=dict)
    # Per kind, per cold epoch, CPU seconds by thread of this process (chute-http, chute-fetch, chute-walk,
    # chute-worker: the decode), the servers' (nginx and the latency relay), and the kernel's writeback of
    # the cache after the epoch (os.sync(), untimed; machine-wide).
    thread_cpu_s: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    servers_cpu_s: dict[str, list[float]] = field(default_factory=dict)
    writeback_cpu_s: dict[str, list[float]] = field(default_factory=dict)
    dataset_bytes: dict[str, int] = field(default_factory=dict)  # per kind ("shards", "tars")
    same_batches: dict[str, bool] = field(default_factory=dict)  # an untimed remote epoch equals the local one
    notes: list[str] = field(default_factory=list)
    io: dict = field(default_factory=dict)  # the remote loader's I/O figures (last cold round of packed shards)

    def rate(self, name: str) -> float:
        return next(r.rate for r in self.rows if r.name == name)

    def local_of(self, row: Contender) -> float:
        """The rate of the local row ``row`` compares with: local tars for tar rows and WebDataset's."""
        tars = "tars" in row.name or row.name.startswith("WebDataset")
        return self.rate(f"chute, local {'tars' if tars else 'shards'}")

    @staticmethod
    def per_core(row: Contender) -> float | None:
        """Images per CPU-second of this process (its reader threads; not the servers, not DataLoader
        workers, which are other processes): None where it does not apply."""
        if not row.timings or any(t.cpu_seconds is None for t in row.timings):
            return None
        return row.summarize(lambda t: t.rate_per_cpu_second).median

    def as_dict(self) -> dict:
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
                    "vs_local": r.rate / self.local_of(r),
                    "img_per_cpu_s": self.per_core(r),
                }
                for r in self.rows
            ],
            "first_batch_s": self.first_batch_s,
            "first_batch_fetched": self.first_batch_fetched,
            "thread_cpu_s": self.thread_cpu_s,
            "servers_cpu_s": self.servers_cpu_s,
            "writeback_cpu_s": self.writeback_cpu_s,
            "dataset_bytes": self.dataset_bytes,
            "same_batches": self.same_batches,
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


def _stat_cpu_s(path: str) -> float:
    """utime + stime of /proc/<pid>[/task/<tid>]/stat, in seconds (0 for one that has gone)."""
    try:
        with open(f"{path}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads_cpu_s() -> dict[str, float]:
    """CPU seconds so far of this process's live threads, summed by name (chute names its own)."""
    total: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except FileNotFoundError:
            continue
        total[name] = total.get(name, 0.0) + _stat_cpu_s(f"/proc/self/task/{tid}")
    return total


def _since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The chute threads' CPU between two readings (threads that ended meanwhile are not counted)."""
    return {k: round(v - before.get(k, 0.0), 3) for k, v in sorted(after.items()) if k.startswith("chute-")}


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


def _http_bytes() -> int:
    """Response bytes this process's HTTP engine has received so far."""
    from chute import remote

    return remote.stats()["bytes"]


def _same_batches(a: chute.Loader, b: chute.Loader) -> bool:
    """Whether two loaders give equal batches in one epoch (compared in lockstep: no batch is kept)."""
    left, right = iter(a), iter(b)
    for (x, y), (wx, wy) in zip(left, right, strict=True):
        if not (torch.equal(y, wy) and torch.equal(x, wx)):
            return False
    return True


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
    from chute import _native
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
        _native.write_tar_indexes([str(t) for t in tars])  # `chute index`: uploaded beside the tars
        os.sync()  # the 2 x dataset just written goes to disk now, not in the kernel's flusher under a timed row
        shards = [p for p in (work / "www" / "packed").iterdir() if p.suffix != ".chidx"]
        shard_bytes = sum(p.stat().st_size for p in shards) // max(len(shards), 1)
        dataset_bytes = {"shards": sum(p.stat().st_size for p in shards), "tars": sum(t.stat().st_size for t in tars)}

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

        def close(made: list[chute.Loader]) -> None:
            while made:
                m = made.pop()
                m.close()
                loaders.remove(m)

        result = RemoteBench(len(source), latency_ms, len(shards), shard_bytes, [], dataset_bytes=dataset_bytes)
        nginx = Nginx(work / "www")
        with nginx as server_url, RelayProcess(server_url, latency_s=latency_ms / 1e3) as proxy:
            urls = {
                "shards": f"{proxy.url}/packed/",
                "tars": f"{proxy.url}/tars/train-{{0000..{len(tars) - 1:04d}}}.tar",
            }
            local_paths = {"shards": work / "www" / "packed", "tars": str(work / "www" / "tars" / "*.tar")}
            local = {kind: loader(chute.open(local_paths[kind], cache_dir=work / "local-cache")) for kind in KINDS}
            warm = loader(chute.open(urls["shards"], cache_dir=work / "warm-cache"))
            on_step("filling the warm cache")
            for _ in warm:
                pass

            def servers() -> float:
                return _tree_cpu_s([pid for pid in (nginx.pid, proxy.pid) if pid is not None])

            def cold(kind: str, steady: Contender, policy: str = "disk") -> Callable[[], Timing]:
                label = kind if policy == "disk" else f"{kind}, cache={policy}"  # its figures' key

                def measure() -> Timing:
                    cache = Path(tempfile.mkdtemp(prefix="cold-", dir=work))
                    made: list[chute.Loader] = []
                    bytes0 = _http_bytes()
                    at_first: list[int] = []

                    def epoch():  # the timed pass opens the dataset and receives every shard
                        made.append(loader(chute.open(urls[kind], cache=policy, cache_dir=cache)))
                        batches = iter(made[0])
                        first = next(batches)
                        at_first.append(_http_bytes() - bytes0)
                        yield first
                        yield from batches

                    try:
                        servers0, threads0 = servers(), _threads_cpu_s()
                        timing = time_epoch(epoch(), cpu_clock=time.process_time)
                        result.servers_cpu_s.setdefault(label, []).append(servers() - servers0)
                        result.thread_cpu_s.setdefault(label, []).append(_since(threads0, _threads_cpu_s()))
                        result.first_batch_s.setdefault(label, []).append(timing.first.seconds)
                        result.first_batch_fetched.setdefault(label, []).append(at_first[0] / dataset_bytes[kind])
                        steady.timings.append(timing.after_first())
                        if label == "shards":
                            result.io = dict(made[0].stats().get("remote", {}))
                        close(made)
                        busy0 = _busy_cpu_s()  # the cache's writes, if the kernel still had any to do
                        os.sync()
                        result.writeback_cpu_s.setdefault(label, []).append(_busy_cpu_s() - busy0)
                        return timing
                    finally:
                        close(made)
                        shutil.rmtree(cache, ignore_errors=True)

                return measure

            steady = {
                kind: Contender(f"chute, remote {kind}, cold, after its first batch", lambda: Timing(0, 1.0))
                for kind in KINDS
            }
            steady_none = Contender(
                "chute, remote shards, cold, cache='none', after its first batch", lambda: Timing(0, 1.0)
            )
            rows = [
                Contender("chute, local shards", lambda: time_epoch(local["shards"], cpu_clock=time.process_time)),
                Contender("chute, remote shards, cold", cold("shards", steady["shards"]), warm=False),
                Contender("chute, remote shards, cold, cache='none'", cold("shards", steady_none, "none"), warm=False),
                Contender(
                    "chute, remote shards, warm disk cache", lambda: time_epoch(warm, cpu_clock=time.process_time)
                ),
                Contender("chute, local tars", lambda: time_epoch(local["tars"], cpu_clock=time.process_time)),
                Contender("chute, remote tars, cold", cold("tars", steady["tars"]), warm=False),
            ]
            try:
                wds_loader = _webdataset_loader([f"{proxy.url}/tars/{t.name}" for t in tars], batch_size, cores)
                rows.append(Contender("WebDataset + DataLoader, remote", lambda: time_epoch(wds_loader)))
            except ImportError as e:
                result.notes.append(f"WebDataset row left out: {e}")
            interleave(rows, rounds=rounds, on_step=on_step)
            rows.insert(2, steady["shards"])
            rows.insert(4, steady_none)
            rows.insert(8, steady["tars"])
            result.rows = rows
            for kind in KINDS:  # untimed: a remote epoch gives the local epoch's batches
                on_step(f"comparing the remote {kind}' batches with the local ones")
                made = [
                    loader(chute.open(local_paths[kind], cache_dir=work / "local-cache")),
                    loader(chute.open(urls[kind], cache="none")),
                ]
                result.same_batches[kind] = _same_batches(*made)
                close(made)
        return result
    finally:
        for made in loaders:
            made.close()
        shutil.rmtree(work, ignore_errors=True)
