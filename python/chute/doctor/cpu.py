"""The CPU layer: CPU time from /proc, sampled while the loader runs, and the machine's core layout.

The training process's own CPU time covers chute's threads (they run inside it) and the training step;
the DataLoader's workers are child processes, read from ``/proc/<pid>/task/*/children``. The main
thread's CPU time (``/proc/self/task/<tid>/stat``) is the training step's and the consumer's share.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from chute.doctor.sampling import BackgroundSampler

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_cpu_seconds(stat_path: str) -> float | None:
    """utime + stime of a /proc stat file, in seconds; None when the process or thread is gone."""
    try:
        text = Path(stat_path).read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces; fields start at state (3rd)
    return (int(fields[11]) + int(fields[12])) / _TICK


def process_cpu_seconds(pid: int | str = "self") -> float | None:
    return _stat_cpu_seconds(f"/proc/{pid}/stat")


def thread_cpu_seconds(tid: int, pid: int | str = "self") -> float | None:
    return _stat_cpu_seconds(f"/proc/{pid}/task/{tid}/stat")


def run_delay_seconds(pid: int) -> float | None:
    """Seconds a process's threads spent runnable but waiting for a core (the scheduler's run-queue delay,
    the second field of ``/proc/<pid>/task/<tid>/schedstat``), summed over its threads; None where the kernel
    keeps no schedstat or the process is gone. A DataLoader worker's time is on a core, waiting for one
    (contended cores) or asleep (idle: its prefetch window is full, or it waits on I/O)."""
    total, found = 0.0, False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for tid in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1]) / 1e9
            found = True
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
            continue
    return total if found else None


def child_pids(pid: int | str = "self") -> list[int]:
    """Direct children of a process (DataLoader workers, among others)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tasks:
        try:
            out.extend(int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return sorted(set(out))


def available_cores() -> int:
    """The engine's count (chute/cores.h): the affinity mask, within the cgroup's CPU quota."""
    from chute import _native

    return _native.available_cores()


def _parse_cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_nodes(sysfs: str = "/sys/devices/system/node") -> dict[int, set[int]]:
    """NUMA node -> its CPUs, from sysfs (what ``lscpu`` reads); empty where sysfs does not say."""
    nodes: dict[int, set[int]] = {}
    root = Path(sysfs)
    if not root.is_dir():
        return nodes
    for entry in root.glob("node[0-9]*"):
        try:
            nodes[int(entry.name[4:])] = _parse_cpulist((entry / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return dict(sorted(nodes.items()))


@dataclass
class CpuTimeline:
    """Cores in use over time, sampled by :class:`CpuSampler`: each list has one entry per interval."""

    t: list[float] = field(default_factory=list)  # seconds since the sampler started (interval end)
    process: list[float] = field(default_factory=list)  # this process (training step + chute threads)
    main_thread: list[float] = field(default_factory=list)
    children: list[float] = field(default_factory=list)  # child processes (DataLoader workers)
    # cores' worth of the children's threads waiting for a core (run-queue delay); empty without schedstat
    children_waiting: list[float] = field(default_factory=list)


class CpuSampler(BackgroundSampler):
    """Samples this process's, its main thread's and its children's CPU time every ``interval`` seconds on
    a background thread (``with CpuSampler() as s: ...``; ``s.timeline`` afterwards)."""

    def __init__(self, interval: float = 0.1):
        super().__init__(interval, "chute-doctor-cpu")
        self.timeline = CpuTimeline()
        self._main_tid = threading.main_thread().native_id
        self._child_cpu: dict[int, float] = {}  # last CPU time seen per child, kept after it exits
        self._child_delay: dict[int, float] = {}  # last run-queue delay seen per child (where schedstat is kept)
        self._schedstat = os.path.exists("/proc/self/schedstat")  # the kernel keeps run-queue delays

    def _read(self) -> tuple[float, float]:
        for pid in child_pids():
            cpu, delay = process_cpu_seconds(pid), run_delay_seconds(pid)
            if cpu is not None:
                self._child_cpu[pid] = cpu
            if delay is not None:
                self._child_delay[pid] = delay
        return process_cpu_seconds() or 0.0, thread_cpu_seconds(self._main_tid) or 0.0

    def _run(self) -> None:
        last_t, (last_proc, last_main) = time.perf_counter(), self._read()
        # children that existed before count only their new time; a child first seen later counts from zero
        # (its start-up is work done in the window)
        cpu_base, delay_base = dict(self._child_cpu), dict(self._child_delay)
        last_children = last_waiting = 0.0
        tl = self.timeline
        stopping = False
        while not stopping:
            stopping = self._stop.wait(self.interval)
            now, (proc, main) = time.perf_counter(), self._read()
            dt = now - last_t
            if dt < 0.01:  # the stop came right after a sample: nothing new to measure
                break
            children = sum(cpu - cpu_base.get(pid, 0.0) for pid, cpu in self._child_cpu.items())
            waiting = sum(delay - delay_base.get(pid, 0.0) for pid, delay in self._child_delay.items())
            tl.t.append(now - self.start_time)
            tl.process.append(max(0.0, (proc - last_proc) / dt))
            tl.main_thread.append(max(0.0, (main - last_main) / dt))
            tl.children.append(max(0.0, (children - last_children) / dt))
            if self._schedstat:
                tl.children_waiting.append(max(0.0, (waiting - last_waiting) / dt))
            last_t, last_proc, last_main, last_children, last_waiting = now, proc, main, children, waiting


@dataclass
class CpuReport:
    cores: int  # cores this process may use (its affinity)
    numa: dict[int, list[int]]  # node -> CPUs this process may use there
    torch_threads: int  # torch's intra-op threads (the training step's)
    loader_threads: int  # chute threads or DataLoader worker processes (0: the main process loads)
    mean_process_cores: float  # cores used by this process over the measured window
    mean_main_thread: float  # fraction of a core the main thread (step + consumer) used
    mean_children_cores: float  # cores used by child processes (DataLoader workers)
    peak_total_cores: float  # the busiest sampling interval, process + children
    load_average: float = 0.0  # the machine's 1-minute load average (runnable threads, all processes)
    # cores' worth of the workers' threads waiting for a core (run-queue delay); None without schedstat
    mean_children_waiting: float | None = None
    stages: dict[str, float] = field(default_factory=dict)  # chute: busy seconds per stage per sample

    @property
    def total_cores_used(self) -> float:
        return self.mean_process_cores + self.mean_children_cores

    @property
    def saturated(self) -> bool:
        """The process and its workers together kept (nearly) every allowed core busy."""
        return self.total_cores_used >= 0.9 * self.cores

    @property
    def oversubscribed(self) -> bool:
        """More runnable threads were set up than cores: the loader and the step compete."""
        return self.loader_threads + self.torch_threads > self.cores

    @property
    def machine_busy(self) -> bool:
        """Other processes wanted the cores too: the load exceeds the cores by more than this job's use."""
        return self.load_average - self.total_cores_used > self.cores * 0.5

    @property
    def spans_numa_nodes(self) -> bool:
        return len([n for n, cpus in self.numa.items() if cpus]) > 1


def cpu_report(timeline: CpuTimeline, *, loader_threads: int, skip_s: float = 0.0) -> CpuReport:
    """Summarises the sampled timeline from ``skip_s`` seconds on (after the warm-up)."""
    import torch

    keep = [i for i, t in enumerate(timeline.t) if t >= skip_s] or list(range(len(timeline.t)))

    def mean(values: list[float]) -> float:
        chosen = [values[i] for i in keep]
        return sum(chosen) / len(chosen) if chosen else 0.0

    allowed = os.sched_getaffinity(0)
    numa = {node: sorted(cpus & allowed) for node, cpus in numa_nodes().items()}
    peak = max((timeline.process[i] + timeline.children[i] for i in keep), default=0.0)
    try:
        load = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load = 0.0
    waiting = None
    if len(timeline.children_waiting) == len(timeline.t) and timeline.t:
        waiting = mean(timeline.children_waiting)
    return CpuReport(
        cores=len(allowed),
        numa=numa,
        torch_threads=torch.get_num_threads(),
        loader_threads=loader_threads,
        mean_process_cores=mean(timeline.process),
        mean_main_thread=mean(timeline.main_thread),
        mean_children_cores=mean(timeline.children),
        peak_total_cores=peak,
        load_average=load,
        mean_children_waiting=waiting,
    )


def worker_figures(total_busy: float, c: CpuReport, workers: int) -> dict:
    """The engine's worker figures for DataLoader worker processes, whose busy time the doctor knows only as
    the profile's per-sample cost: ``worker_cpu_s`` and ``worker_idle_s`` in proportion to it. A worker's
    time is on a core (their CPU time), waiting for one (their run-queue delay, /proc schedstat: contended
    cores) or asleep (idle: the prefetch window is full, or a read blocks). Without schedstat, input-bound
    workers are taken as busy all the time: the CPU they got per busy second is the cores used per worker,
    and no idle time is known."""
    on_cpu = c.mean_children_cores
    if c.mean_children_waiting is None:
        return {"worker_cpu_s": total_busy * min(1.0, on_cpu / workers)}
    busy = on_cpu + c.mean_children_waiting  # cores' worth of worker threads on or waiting for a core
    if busy <= 0:
        return {}
    return {
        "worker_cpu_s": total_busy * on_cpu / busy,
        "worker_idle_s": total_busy * max(workers - busy, 0.0) / busy,
    }
