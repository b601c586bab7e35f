"""The storage layer: what the dataset's files cost to list and to read, cold and hot, and where they live.

Cold reads drop each file from the page cache first with ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root
needed; it cannot evict tmpfs pages, whose "cold" figure is then a hot one, and says so, nor pages not yet
written back, as in a dataset written moments ago). The directory
scan is timed as ImageFolder does it (``os.walk`` with a ``stat`` per entry) over the directories that hold
the dataset's files; its dentries are usually cached by then, so the figure is a lower bound.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HUGE_DIRECTORY = 10_000  # entries in one directory that make listing and lookups slow on most filesystems
NETWORK_FS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "ceph",
    "glusterfs",
    "9p",
    "afs",
    "beegfs",
    "wekafs",
    "orangefs",
    "davfs",
)
_READ_CHUNK = 1 << 20


def dataset_files(obj) -> list[str] | None:
    """The files behind a chute loader or source, a DataLoader's dataset or a dataset, or None when it
    does not say (in-memory tensors, generated data, an unknown class)."""
    import chute

    if isinstance(obj, chute.Loader):
        obj = obj.source
    if isinstance(obj, chute.ImageFolder):
        return [p for p, _ in obj.samples]
    if isinstance(obj, chute.PackedDataset):  # its shards (its samples' names are keys, not files)
        if obj.remote_stats() is not None:
            return None  # remote: the loader's stats()["remote"] holds its I/O figures
        return [os.path.join(obj._native.directory, name) for name, *_ in obj._native.shards()]
    if isinstance(obj, chute.TarDataset):
        return None if obj.remote_stats() is not None else list(obj.paths)
    dataset = getattr(obj, "dataset", obj)  # a DataLoader's dataset
    while hasattr(dataset, "indices") and hasattr(dataset, "dataset"):  # torch.utils.data.Subset
        dataset = dataset.dataset
    for name in ("samples", "imgs", "files", "paths", "image_paths"):
        items = getattr(dataset, name, None)
        if isinstance(items, (list, tuple)) and items:
            first = items[0]
            if isinstance(first, (tuple, list)) and first and isinstance(first[0], (str, os.PathLike)):
                return [os.fspath(item[0]) for item in items]
            if isinstance(first, (str, os.PathLike)):
                return [os.fspath(item) for item in items]
    return None


@dataclass
class Mount:
    mount_point: str
    fs_type: str
    source: str

    @property
    def network(self) -> bool:
        return self.fs_type in NETWORK_FS or self.fs_type.startswith("fuse.") or self.fs_type == "fuse"


def _unescape(text: str) -> str:
    return text.encode().decode("unicode_escape") if "\\" in text else text  # octal escapes (\040)


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> Mount | None:
    """The mount holding ``path`` (longest mount-point prefix of its real path), from mountinfo."""
    real = os.path.realpath(path)
    best: Mount | None = None
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        point = _unescape(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = Mount(point, tail[0], tail[1])
    return best


@dataclass
class ReadProbe:
    files: int
    bytes: int
    seconds: float
    latencies_ms: list[float]

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def files_per_s(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else 0.0


def _read_all(path: str) -> int:
    n = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while chunk := os.read(fd, _READ_CHUNK):
            n += len(chunk)
    finally:
        os.close(fd)
    return n


def _evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_probe(paths: list[str], *, cold: bool, budget_s: float) -> ReadProbe:
    """Reads ``paths`` in the given (random) order, one thread, until done or ``budget_s`` is spent."""
    if cold:
        for p in paths:
            _evict(p)
    total, latencies = 0, []
    start = time.perf_counter()
    for p in paths:
        t0 = time.perf_counter()
        total += _read_all(p)
        latencies.append(1e3 * (time.perf_counter() - t0))
        if time.perf_counter() - start > budget_s:
            break
    return ReadProbe(len(latencies), total, time.perf_counter() - start, latencies)


@dataclass
class StorageReport:
    files: int
    dataset_bytes: int  # measured (stat of every file) or estimated from a sample (see bytes_estimated)
    bytes_estimated: bool
    directories: int
    largest_directory: tuple[str, int]  # the directory with the most entries, and their count
    huge_directories: list[tuple[str, int]]
    scan_s: float  # listing every directory holding the files, with a stat per entry (hot)
    scan_entries: int
    mount: Mount | None
    cold: ReadProbe
    hot: ReadProbe
    mem_total: int
    mem_available: int
    notes: list[str] = field(default_factory=list)

    @property
    def mean_file_bytes(self) -> float:
        return self.dataset_bytes / self.files if self.files else 0.0

    @property
    def exceeds_page_cache(self) -> bool:
        """The dataset does not fit in the memory the page cache could use: epochs read from storage."""
        return self.dataset_bytes > self.mem_available

    def cold_rate_for(self, samples_per_s: float) -> float:
        """Cold single-thread read rate as a multiple of what ``samples_per_s`` samples need."""
        need = samples_per_s * self.mean_file_bytes
        return self.cold.mb_per_s * 1e6 / need if need > 0 else float("inf")


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    except OSError:
        pass
    return out


def _scan(directories: list[str]) -> tuple[float, int, dict[str, int]]:
    """Lists each directory (not recursively) with a stat per entry, as ImageFolder's walk does."""
    counts: dict[str, int] = {}
    start = time.perf_counter()
    for d in directories:
        n = 0
        with os.scandir(d) as it:
            for entry in it:
                entry.is_dir()  # ImageFolder's walk asks this of every entry (a stat where d_type is unknown)
                n += 1
        counts[d] = n
    return time.perf_counter() - start, sum(counts.values()), counts


def probe_storage(
    paths: list[str], *, budget_s: float = 1.0, sample: int = 64, seed: int = 0, stat_limit: int = 5_000
) -> StorageReport:
    """Measures the storage layer for a dataset's files within about ``2 * budget_s`` seconds of reads
    plus one directory scan. The dataset's size is summed from a stat of every file up to ``stat_limit``
    files, beyond that estimated from the sampled files (a stat costs a round trip on network storage)."""
    if not paths:
        raise ValueError("the dataset has no files to probe")
    per_dir = Counter(os.path.dirname(os.path.abspath(p)) for p in paths)
    scan_s, scan_entries, counts = _scan(sorted(per_dir))
    largest = max(counts.items(), key=lambda kv: kv[1])
    huge = sorted(((d, n) for d, n in counts.items() if n >= HUGE_DIRECTORY), key=lambda kv: -kv[1])

    rng = random.Random(seed)
    chosen = rng.sample(paths, min(sample, len(paths)))
    if len(paths) <= stat_limit:
        dataset_bytes, estimated = sum(os.stat(p).st_size for p in paths), False
    else:
        sizes = [os.stat(p).st_size for p in chosen]
        dataset_bytes, estimated = int(statistics.fmean(sizes) * len(paths)), True

    mount = mount_of(paths[0])
    notes = []
    if mount is not None and mount.fs_type in ("tmpfs", "ramfs"):
        notes.append(f"the files are on {mount.fs_type} (memory): cold reads cannot be measured there")
    cold = read_probe(chosen, cold=True, budget_s=budget_s)
    hot = read_probe(chosen[: cold.files], cold=False, budget_s=budget_s)
    mem = _meminfo()
    return StorageReport(
        files=len(paths),
        dataset_bytes=dataset_bytes,
        bytes_estimated=estimated,
        directories=len(counts),
        largest_directory=largest,
        huge_directories=huge,
        scan_s=scan_s,
        scan_entries=scan_entries,
        mount=mount,
        cold=cold,
        hot=hot,
        mem_total=mem.get("MemTotal", 0),
        mem_available=mem.get("MemAvailable", 0),
        notes=notes,
    )
