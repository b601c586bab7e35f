"""What ``chute.doctor(loader, step_fn)`` and ``chute.doctor.watch(loader)`` share around a measured run:
their arguments checked, the loader named, the device layer set up (NVML, when a CUDA device is there), and
the layers analysed that do not need the loader running (storage, the dataset profile, the CPU summary, a
RemoteLoader's actors)."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, IterableDataset

import chute
from chute.doctor.cpu import cpu_report
from chute.doctor.device import DeviceReport, GpuSampler, Nvml, NvmlError, nvml_index, resolve_cuda_device, time_copy
from chute.doctor.findings import Findings
from chute.doctor.measure import Run
from chute.doctor.profile import profile_dataset
from chute.doctor.remote import RemoteReport, is_remote
from chute.doctor.storage import dataset_files, probe_storage

PROFILE_SAMPLES = 16  # dataset[i] profiled over this many samples
MORE_STEPS = 5  # measure up to this many times `steps` batches while the stall's interval straddles the threshold
# ... or while the measured batches span less than this: stage and CPU shares over a few tens of milliseconds
# (12 quick batches) swing with whatever else the scheduler ran then
MIN_MEASURE_S = 0.5


def check_args(loader, step_fn, steps, warmup) -> None:
    """The arguments doctor() and watch() share, checked before anything runs."""
    if isinstance(loader, (str, bytes)) or not hasattr(loader, "__iter__"):
        raise TypeError(
            f"chute.doctor needs a loader to iterate (a chute.Loader, a torch DataLoader or any "
            f"iterable of batches), got {type(loader).__name__}"
        )
    if step_fn is not None and not callable(step_fn):
        raise TypeError(f"step_fn must be callable (it receives each batch) or None, got {type(step_fn).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"steps must be a positive int (batches to measure), got {steps!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")


def loader_label(loader) -> str:
    """The loader's row in the throughput table."""
    if isinstance(loader, chute.Loader):
        return "chute.Loader"
    if isinstance(loader, chute.DataLoader):
        return f"chute.DataLoader num_workers={loader.num_workers}"
    if isinstance(loader, DataLoader):
        return f"DataLoader num_workers={loader.num_workers}"
    if is_remote(loader):
        return f"chute.ray.RemoteLoader num_actors={loader.num_actors}"
    return type(loader).__name__


def describe_loader(loader) -> str:
    """What is diagnosed, in words: the report's title."""
    if isinstance(loader, chute.Loader) or is_remote(loader):
        return repr(loader)
    if isinstance(loader, DataLoader):
        kind = "chute.DataLoader" if isinstance(loader, chute.DataLoader) else "torch DataLoader"
        return (
            f"{kind} over {type(loader.dataset).__name__} ({len(loader.dataset):,} samples), "
            f"batch_size={loader.batch_size}, num_workers={loader.num_workers}"
            if hasattr(loader.dataset, "__len__")
            else f"{kind} over {type(loader.dataset).__name__}"
        )
    return type(loader).__name__


class DeviceLayer:
    """The device layer's set-up: NVML when it loads and a CUDA device is there, else the reason."""

    def __init__(self, device, nvml_library: str):
        self.cuda_index, reason = resolve_cuda_device(device)
        self.nvml: Nvml | None = None
        self.sampler: GpuSampler | None = None
        self.report = DeviceReport(available=False, reason=reason)
        if self.cuda_index is None:
            return
        try:
            self.nvml = Nvml.open(nvml_library)
        except NvmlError as e:
            self.report.reason = str(e)
            return
        self.report.available = True

    def sampler_factory(self) -> Callable | None:
        if self.nvml is None:
            return None

        def make() -> GpuSampler:
            self.sampler = GpuSampler(self.nvml, nvml_index(self.cuda_index))
            return self.sampler

        return make

    def finish(self, run: Run) -> DeviceReport:
        r = self.report
        if self.nvml is None:
            return r
        s = self.sampler
        if s is not None:
            r.name, r.memory_total, r.timeline = s.name, s.memory_total, s.timeline
            span = (s.timeline.t[-1] - s.timeline.t[0]) if len(s.timeline.t) > 1 else 0.0
            r.sample_hz = (len(s.timeline.t) - 1) / span if span > 0 else 0.0
            if s.error:
                r.reason = s.error
        if run.sample:
            r.copy = time_copy(max(run.sample, key=lambda t: t.numel() * t.element_size()), self.cuda_index)
        self.nvml.close()
        return r


def analyse(d: Findings, loader, *, storage: bool, profile: bool) -> None:
    """The layers that do not need the loader running: storage, the dataset profile, the CPU summary, and a
    RemoteLoader's actors."""
    run = d.run
    if run.remote_stats is not None:
        d.remote = RemoteReport.from_stats(run.remote_stats)
    dataset = getattr(loader, "dataset", None) if isinstance(loader, DataLoader) else None
    if run.loader_stats is not None:
        dataset = None  # on chute's engine: its own stage timers say where the time goes; dataset[i] never runs
    if profile and dataset is not None and not isinstance(dataset, IterableDataset) and hasattr(dataset, "__len__"):
        n = len(dataset)
        if n:
            indices = random.Random(0).sample(range(n), min(PROFILE_SAMPLES, n))
            # Workers run with one torch thread (the DataLoader sets it); num_workers=0 runs with this
            # process's setting. Profile under the same, or torch ops in the transforms mislead.
            threads = torch.get_num_threads()
            if d.dataloader is not None and d.dataloader.num_workers > 0:
                torch.set_num_threads(1)
            try:
                d.profile = profile_dataset(dataset, indices)
            finally:
                torch.set_num_threads(threads)
    if storage and d.remote is not None:
        d.notes.append(
            "storage: not probed for a RemoteLoader: its actors read the source on their own nodes; their time "
            "per batch (reads included) is the remote layer's actor time"
        )
    elif storage:
        files = dataset_files(loader)
        if files:
            d.storage = probe_storage(files)
        elif isinstance((run.loader_stats or {}).get("remote"), dict):
            d.notes.append("storage: remote (object storage); its requests, latency and cache are in the evidence")
        else:
            d.notes.append("storage: the dataset names no files (in-memory or generated data); not measured")
    loader_threads = 0
    if run.loader_stats is not None:
        loader_threads = run.loader_stats["active_threads"]
    elif d.dataloader is not None:
        loader_threads = d.dataloader.num_workers_running
    d.cpu = cpu_report(run.cpu, loader_threads=loader_threads, skip_s=run.measured_start)
    if run.loader_stats is not None:
        s, n = run.loader_stats, max(run.loader_stats["samples"], 1)
        d.cpu.stages = {k: s[f"{k}_s"] / n for k in ("read", "decode", "transform", "batch")}
    try:
        d.batches_per_epoch = len(loader)
    except TypeError:
        pass
