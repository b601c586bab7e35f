"""``chute.doctor(loader, step_fn)``: the whole investigation in one call, the loaders measured beside the
user's included; ``chute.doctor.watch(loader)`` and ``chute doctor script.py``: the same measurements on a
loop the user's script drives (``watching.py``), hooked into the first loader a script iterates."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader

import chute
from chute.doctor.compare import (
    DROPIN_LABEL,
    chute_equivalent,
    dataloader_info,
    dropin_equivalent,
    torch_equivalent,
    with_workers,
)
from chute.doctor.cpu import available_cores
from chute.doctor.investigation import (
    MIN_MEASURE_S,
    MORE_STEPS,
    DeviceLayer,
    analyse,
    check_args,
    describe_loader,
    loader_label,
)
from chute.doctor.measure import run_loader
from chute.doctor.report import Diagnosis
from chute.doctor.verdict import INPUT_BOUND_STALL, decide
from chute.doctor.watching import Watch


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
    check_args(loader, step_fn, steps, warmup)
    if max_steps is None:
        max_steps = MORE_STEPS * steps
    notes = _check_report_prerequisites(report) if report is not None else []
    dev = DeviceLayer(device, nvml_library)
    measure = dict(
        steps=steps, warmup=warmup, max_steps=max_steps, threshold=INPUT_BOUND_STALL, min_seconds=MIN_MEASURE_S
    )
    run = run_loader(loader, step_fn, label=loader_label(loader), gpu_sampler_factory=dev.sampler_factory(), **measure)
    d = Diagnosis(target=describe_loader(loader), run=run, notes=notes)
    if isinstance(loader, DataLoader):
        d.dataloader = dataloader_info(loader)
    analyse(d, loader, storage=storage, profile=profile)

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
    # The drop-in first: where chute.DataLoader runs this pipeline natively, changing one import is the advice.
    dropin, kind = dropin_equivalent(dl)
    if dropin is not None:
        d.comparisons.append(run_loader(dropin, step_fn, label=f"{DROPIN_LABEL} (fast:{kind})", **measure))
        return
    if not isinstance(dl, chute.DataLoader):
        d.notes.append(f"comparison with the drop-in chute.DataLoader: not run ({kind})")
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
        # chute.DataLoader defines its own __iter__: patching torch's class alone would never see it.
        classes = [DataLoader, chute.DataLoader, chute.Loader]
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
            if self.done:
                return _original(loader)
            self.done = True
            self.uninstall()  # chute.DataLoader's generic path calls torch's __iter__: that one is the original now
            iterator = _original(loader)
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
    check_args([], None, steps, warmup)
    _auto.install(steps=steps, warmup=warmup, report=report)
    return True


doctor.watch = watch  # chute.doctor.watch(loader): the function carries its companion
