"""``chute.doctor(loader, step_fn)``: the whole investigation in one call; ``chute.doctor.watch(loader)``:
the same measurements on a loop the user's script drives."""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, IterableDataset

import chute
from chute.doctor.compare import chute_equivalent, dataloader_info, torch_equivalent, with_workers
from chute.doctor.cpu import available_cores, cpu_report
from chute.doctor.device import DeviceReport, GpuSampler, Nvml, NvmlError, nvml_index, resolve_cuda_device, time_copy
from chute.doctor.measure import LoaderSpan, Recorder, Run, batch_samples, run_loader
from chute.doctor.profile import profile_dataset
from chute.doctor.remote import RemoteReport, is_remote
from chute.doctor.report import Diagnosis
from chute.doctor.storage import dataset_files, probe_storage
from chute.doctor.verdict import INPUT_BOUND_STALL, decide

PROFILE_SAMPLES = 16
MORE_STEPS = 5  # measure up to this many times `steps` batches while the stall's interval straddles the threshold
# ... or while the measured batches span less than this: stage and CPU shares over a few tens of milliseconds
# (12 quick batches) swing with whatever else the scheduler ran then
MIN_MEASURE_S = 0.5


def _check_args(loader, step_fn, steps, warmup) -> None:
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


def _path(loader) -> str | None:
    """The path a chute.DataLoader took (``"generic"`` or ``"fast:<kind>"``), None for other loaders."""
    return loader.stats().get("path") if isinstance(loader, chute.DataLoader) else None


def _label(loader) -> str:
    if isinstance(loader, chute.Loader):
        return "chute.Loader"
    if isinstance(loader, chute.DataLoader):
        return f"chute.DataLoader num_workers={loader.num_workers}"
    if isinstance(loader, DataLoader):
        return f"DataLoader num_workers={loader.num_workers}"
    if is_remote(loader):
        return f"chute.ray.RemoteLoader num_actors={loader.num_actors}"
    return type(loader).__name__


def _describe(loader) -> str:
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


class _Device:
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


def _analyse(d: Diagnosis, loader, *, storage: bool, profile: bool) -> None:
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


def doctor(
    loader,
    step_fn: Callable | None = None,
    *,
    steps: int = 20,
    warmup: int = 3,
    device=None,
    storage: bool = True,
    compare: bool = True,
    profile: bool = True,
    report: str | None = None,
    nvml_library: str = "libnvidia-ml.so.1",
    max_steps: int | None = None,
) -> Diagnosis:
    """Finds where a training job's input pipeline stalls and says what to change.

    ``loader`` is a :class:`chute.Loader`, a ``torch.utils.data.DataLoader``, a
    :class:`chute.ray.RemoteLoader` (its actors are the remote layer: ``Diagnosis.remote``; storage and the
    comparison runs do not apply to it) or any iterable of batches.
    With ``step_fn`` (the training step, called with each batch) the doctor measures the time the step
    waits for data, the step's own time and the data-stall fraction; without it, the loader alone, against
    a consumer that does nothing. ``warmup`` batches run first (start-up is reported, not averaged in),
    then ``steps`` batches are measured, and more, ``steps`` at a time up to ``max_steps`` (default
    ``5 * steps``), while the stall's 95% confidence interval still straddles the input-bound threshold
    or the measured batches span under half a second; if the interval still straddles it, the verdict is
    "borderline", with the interval. Meanwhile it samples CPU time from /proc at 10 Hz and, with a
    CUDA device, GPU utilisation through NVML at 20 Hz.

    Then it measures the other layers: the dataset's files (listing cost, cold and hot reads, filesystem,
    page cache), where ``dataset[i]`` spends its time (a DataLoader's map-style dataset), and, for a
    DataLoader, the same loader with a worker per core and a chute loader over the same ImageFolder and
    transforms, each with the same ``step_fn`` and ``steps`` (``compare=False`` skips them).

    Returns a :class:`~chute.doctor.report.Diagnosis`: ``print()`` it for the summary; ``report=path``
    writes the HTML report too. The loader's and the step's exceptions propagate, with a note naming the
    batch.
    """
    _check_args(loader, step_fn, steps, warmup)
    if max_steps is None:
        max_steps = MORE_STEPS * steps
    notes = _check_report_prerequisites(report) if report is not None else []
    dev = _Device(device, nvml_library)
    measure = dict(
        steps=steps, warmup=warmup, max_steps=max_steps, threshold=INPUT_BOUND_STALL, min_seconds=MIN_MEASURE_S
    )
    run = run_loader(loader, step_fn, label=_label(loader), gpu_sampler_factory=dev.sampler_factory(), **measure)
    d = Diagnosis(target=_describe(loader), run=run, notes=notes)
    if isinstance(loader, DataLoader):
        d.dataloader = dataloader_info(loader)
    _analyse(d, loader, storage=storage, profile=profile)

    if compare and isinstance(loader, DataLoader):
        _compare(d, loader, step_fn, measure)
    elif compare and d.remote is not None:
        d.notes.append(
            "comparison: not run for a RemoteLoader (its batches are made on the actors, not by this process's "
            "threads: no other loader or thread setting here is its alternative); more actors are estimated "
            "from RemoteLoader's model instead"
        )
    elif compare:
        d.notes.append("comparison: only a DataLoader is compared against other loaders")
    if compare and step_fn is not None and d.remote is None:
        _trial_fewer_torch_threads(d, loader, step_fn, measure)
    d.device = dev.finish(run)
    d.verdict = decide(d)
    if report is not None:
        d.save_html(report)
    return d


def _check_report_prerequisites(report) -> list[str]:
    """Before a long measurement, what the report needs: a writable folder (else ValueError now, not after
    the measurement) and matplotlib for its plots (else a note: the report is written without them)."""
    from pathlib import Path

    from chute.doctor.report_html import have_matplotlib

    folder = Path(report).resolve().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ValueError(f"chute.doctor: cannot write the report to {report}: {folder} is not a writable folder")
    if not have_matplotlib():
        return ["report: written without plots, since matplotlib is not installed (pip install 'chute[plot]')"]
    return []


def _compare(d: Diagnosis, dl: DataLoader, step_fn, measure: dict) -> None:
    path = d.dataloader.path
    if path is not None and path.startswith("fast:"):
        # chute.DataLoader took a native fast path: the alternative is torch's own DataLoader, not chute.
        other = torch_equivalent(dl)
        if other is None:
            d.notes.append("comparison with torch's DataLoader: not run (a custom batch sampler)")
            return
        d.comparisons.append(
            run_loader(
                other, step_fn, label=f"torch DataLoader num_workers={other.num_workers}", close_workers=True, **measure
            )
        )
        return
    cores = available_cores()
    if dl.num_workers < cores and not (d.run.with_step and d.run.stall_fraction < INPUT_BOUND_STALL):
        other = with_workers(dl, cores)
        if other is not None:
            d.comparisons.append(
                run_loader(other, step_fn, label=f"DataLoader num_workers={cores}", close_workers=True, **measure)
            )
    loader, reason = chute_equivalent(dl)
    if loader is None:
        d.notes.append(f"comparison with chute: not run ({reason})")
        return
    with loader:
        d.comparisons.append(run_loader(loader, step_fn, label="chute.Loader (auto)", **measure))


def _trial_fewer_torch_threads(d: Diagnosis, loader, step_fn, measure: dict) -> None:
    """A measured trial, never a model: when the job is input-bound and the loader's threads or workers plus
    torch's intra-op threads outnumber the cores, rerun the same loader with torch.set_num_threads(1)
    around the step. Its gain (or loss) is what the verdict reports."""
    c, run = d.cpu, d.run
    threads = torch.get_num_threads()
    if c is None or threads <= 1 or not c.oversubscribed or run.stall_fraction < INPUT_BOUND_STALL:
        return
    torch.set_num_threads(1)
    try:
        d.comparisons.append(
            run_loader(
                loader,
                step_fn,
                label=f"torch.set_num_threads(1) in the step (was {threads})",
                close_workers=isinstance(loader, DataLoader),
                **measure,
            )
        )
    finally:
        torch.set_num_threads(threads)


class Watch:
    """Wraps a loader so that iterating it measures the first ``warmup + steps`` batches as the script's
    own loop consumes them: the wait in ``next()`` is the data stall, the time until the loop asks again
    is the step. Then it diagnoses (storage, CPU, the dataset profile; no comparison runs, since the job
    is running), prints the report to stderr, writes ``report`` if given, and passes the rest of the
    batches through untouched."""

    def __init__(
        self,
        loader,
        *,
        steps: int = 20,
        warmup: int = 3,
        report: str | None = None,
        device=None,
        storage: bool = True,
        max_steps: int | None = None,
    ):
        _check_args(loader, None, steps, warmup)
        self.loader, self.steps, self.warmup, self.report = loader, steps, warmup, report
        self.max_steps = MORE_STEPS * steps if max_steps is None else max_steps
        self.device, self.storage = device, storage
        self.diagnosis: Diagnosis | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):  # the wrapped loader's attributes (batch_size, dataset, set_epoch, ...)
        return getattr(self.loader, name)

    def __iter__(self):
        return self.wrap(iter(self.loader))

    def wrap(self, iterator):
        if self.diagnosis is not None:  # measured already: later epochs pass through
            yield from iterator
            return
        from chute.doctor.cpu import CpuSampler

        dev = _Device(self.device, "libnvidia-ml.so.1")
        span = LoaderSpan(self.loader)
        recorder = Recorder("watched loader", self.warmup, True)
        factory = dev.sampler_factory()
        gpu = factory() if factory else None
        sampler = CpuSampler().__enter__()
        if gpu is not None:
            gpu.__enter__()
        recorder.t0 = start = sampler.start_time
        recorder.keep_first = dev.nvml is not None
        pending, closed = None, False  # pending: (ask, got, samples) of the batch in the loop body
        try:
            i, limit = 0, self.warmup + self.steps
            while True:
                ask = time.perf_counter()
                if pending is not None:  # the loop body ran from `got` until it asked again, now
                    recorder.record(pending[0], pending[1], ask, pending[2])
                    pending = None
                if i == limit:
                    # Measure on, `steps` at a time, while the stall's interval straddles the threshold.
                    if limit - self.warmup < self.max_steps and not recorder.run.settled(INPUT_BOUND_STALL):
                        limit = min(limit + self.steps, self.warmup + self.max_steps)
                    else:
                        break
                if i == self.warmup:
                    span.start()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                got = time.perf_counter()
                if i == 0:
                    recorder.first(batch, got - start)
                pending = (ask, got, batch_samples(batch))
                yield batch
                del batch
                i += 1
            if pending is not None:
                recorder.record(pending[0], pending[1], time.perf_counter(), pending[2])
                pending = None
        except GeneratorExit:  # the loop stopped early (break): diagnose what was measured
            closed = True
            if pending is not None:
                recorder.record(pending[0], pending[1], time.perf_counter(), pending[2])
        finally:
            sampler.__exit__(None, None, None)
            if gpu is not None:
                gpu.__exit__(None, None, None)
        run = recorder.run
        run.cpu = sampler.timeline
        run.gpu = gpu.timeline if gpu is not None else None
        if run.steps:
            if len(run.steps) <= run.warmup:
                run.warmup = min(1, len(run.steps) - 1)
            span.finish(run)
            self.diagnosis = self._diagnose(run, dev)
        if closed:
            return
        yield from iterator

    def _diagnose(self, run: Run, dev: _Device) -> Diagnosis:
        d = Diagnosis(target=_describe(self.loader), run=run)
        if isinstance(self.loader, DataLoader):
            d.dataloader = dataloader_info(self.loader)
        _analyse(d, self.loader, storage=self.storage, profile=True)
        d.notes.append("comparison: not run while watching a job (run chute.doctor(loader, step_fn) for it)")
        d.device = dev.finish(run)
        d.verdict = decide(d)
        from rich.console import Console

        d.print(Console(stderr=True))
        if self.report is not None:
            d.save_html(self.report)
        return d


def watch(
    loader,
    *,
    steps: int | None = None,
    warmup: int | None = None,
    report: str | None = None,
    device=None,
    storage: bool = True,
    max_steps: int | None = None,
) -> Watch:
    """Returns ``loader`` wrapped for the doctor: use it in place of the loader in the training loop.
    After ``warmup + steps`` batches (3 + 20 by default) it prints the diagnosis (and writes ``report``);
    the loop goes on. Watching the same loader again returns the same wrapper, so it can sit inside the
    epoch loop. Under ``chute doctor script.py``, options left out come from the command line."""
    existing = getattr(loader, "__dict__", {}).get(_WATCH_ATTR)
    if existing is not None:
        return existing
    defaults = _auto.options if _auto.installed else {}
    w = Watch(
        loader,
        steps=steps if steps is not None else defaults.get("steps", 20),
        warmup=warmup if warmup is not None else defaults.get("warmup", 3),
        report=report if report is not None else defaults.get("report"),
        device=device,
        storage=storage,
        max_steps=max_steps if max_steps is not None else defaults.get("max_steps"),
    )
    try:
        # On the loader itself, not in a WeakKeyDictionary: there the Watch (which holds the loader) would
        # keep its own key alive, and the loader's threads would never end. This cycle the collector frees.
        vars(loader)[_WATCH_ATTR] = w
    except TypeError:
        pass  # an object without __dict__: watching it again wraps it again
    if _auto.installed:  # an explicit watch takes precedence over `chute doctor script.py`'s automatic one
        _auto.done = True
        _auto.uninstall()
        _auto.watches.append(w)
    return w


_WATCH_ATTR = "_chute_doctor_watch"


class _AutoWatch:
    """``chute doctor script.py``: the first DataLoader, chute.Loader or chute.ray.RemoteLoader the script
    iterates is watched. RemoteLoader's class is patched only where ``chute.ray`` is loaded (that imports
    Ray): here when it already is, else by :func:`adopt_loader_class` when ``chute.ray.loader`` is imported."""

    def __init__(self):
        self.done = False
        self.originals: dict = {}
        self.options: dict = {}
        self.watches: list[Watch] = []

    @property
    def installed(self) -> bool:
        return bool(self.originals)

    def install(self, **options) -> None:
        self.options, self.done, self.watches = options, False, []
        classes = [DataLoader, chute.Loader]
        remote = sys.modules.get("chute.ray.loader")
        if remote is not None:
            classes.append(remote.RemoteLoader)
        for cls in classes:
            self.patch(cls)

    def patch(self, cls) -> None:
        """Watch the first iteration of a loader of class ``cls`` (once per class)."""
        if cls in self.originals:
            return
        original = cls.__iter__
        self.originals[cls] = original

        def patched(loader, _original=original):
            iterator = _original(loader)
            if self.done:
                return iterator
            self.done = True
            self.uninstall()
            w = Watch(loader, **self.options)
            self.watches.append(w)
            return w.wrap(iterator)

        cls.__iter__ = patched

    def uninstall(self) -> None:
        for cls, original in self.originals.items():
            cls.__iter__ = original
        self.originals.clear()


_auto = _AutoWatch()


def adopt_loader_class(cls) -> None:
    """Called by ``chute.ray.loader`` when it is imported: a script under ``chute doctor script.py`` or
    ``CHUTE_DOCTOR=1`` that imports chute.ray after the hook was installed gets its RemoteLoader watched
    too (the hook itself does not import Ray)."""
    if _auto.installed and not _auto.done:
        _auto.patch(cls)


def run_script(path: str, args: list[str], **options) -> list[Diagnosis]:
    """Runs a Python script as ``__main__`` (with ``sys.argv = [path, *args]``) under the doctor: the
    first loader it iterates is watched, unless it calls :func:`watch` itself."""
    import runpy

    _auto.install(**options)
    old_argv = sys.argv
    sys.argv = [path, *args]
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = old_argv
        _auto.uninstall()
    found = [w.diagnosis for w in _auto.watches if w.diagnosis is not None]
    _auto.watches = []
    return found


def watch_from_environment(environ=os.environ) -> bool:
    """The environment-variable hook, run by ``import chute``: with ``CHUTE_DOCTOR`` set (not ``0``), the
    first DataLoader, chute.Loader or chute.ray.RemoteLoader the process iterates is watched, as under ``chute doctor script.py``;
    for jobs the CLI cannot wrap, such as ``CHUTE_DOCTOR=1 torchrun train.py``. A value ending in
    ``.html`` is also the report's path, where ``{rank}`` becomes the process's ``RANK``.
    ``CHUTE_DOCTOR_STEPS`` and ``CHUTE_DOCTOR_WARMUP`` set the batches. Returns whether it is on."""
    value = environ.get("CHUTE_DOCTOR", "").strip()
    if not value or value == "0" or _auto.installed:
        return False
    report = value.replace("{rank}", environ.get("RANK", "0")) if value.endswith(".html") else None
    try:
        steps, warmup = int(environ.get("CHUTE_DOCTOR_STEPS", 20)), int(environ.get("CHUTE_DOCTOR_WARMUP", 3))
    except ValueError:
        raise ValueError("CHUTE_DOCTOR_STEPS and CHUTE_DOCTOR_WARMUP must be integers") from None
    _check_args([], None, steps, warmup)
    _auto.install(steps=steps, warmup=warmup, report=report)
    return True


doctor.watch = watch  # chute.doctor.watch(loader): the function carries its companion
