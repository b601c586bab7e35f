"""``chute.doctor.watch(loader)``'s wrapper: the doctor's measurements on a loop the user's script drives."""

from __future__ import annotations

import time

from torch.utils.data import DataLoader

import chute
from chute._batches import batch_samples
from chute.doctor.compare import DROPIN_LABEL, dataloader_info, dropin_equivalent
from chute.doctor.cpu import CpuSampler
from chute.doctor.investigation import MORE_STEPS, DeviceLayer, analyse, check_args, describe_loader
from chute.doctor.measure import LoaderSpan, Recorder, Run, run_loader
from chute.doctor.report import Diagnosis
from chute.doctor.verdict import INPUT_BOUND_STALL, decide


class Watch:
    """Wraps a loader so that iterating it measures the first ``warmup + steps`` batches as the script's
    own loop consumes them: the wait in ``next()`` is the data stall, the time until the loop asks again
    is the step. Then it diagnoses (storage, CPU, the dataset profile; of the comparison runs only the
    drop-in's, for a torch DataLoader whose pipeline chute.DataLoader runs natively: that loader alone, since
    the step is the script's), prints the report to stderr, writes ``report`` if given, and passes the rest of
    the batches through untouched."""

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
        check_args(loader, None, steps, warmup)
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
        dev = DeviceLayer(self.device, "libnvidia-ml.so.1")
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

    def _diagnose(self, run: Run, dev: DeviceLayer) -> Diagnosis:
        d = Diagnosis(target=describe_loader(self.loader), run=run)
        if isinstance(self.loader, DataLoader):
            d.dataloader = dataloader_info(self.loader)
        analyse(d, self.loader, storage=self.storage, profile=True)
        self._compare_dropin(d)
        d.notes.append(
            "comparison: only the drop-in's, and the loader alone, while watching a job (the step is the script's; "
            "run chute.doctor(loader, step_fn) to measure the others with it)"
        )
        d.device = dev.finish(run)
        d.verdict = decide(d)
        from rich.console import Console

        d.print(Console(stderr=True))
        if self.report is not None:
            d.save_html(self.report)
        return d

    def _compare_dropin(self, d: Diagnosis) -> None:
        """For a torch DataLoader whose pipeline chute.DataLoader runs on a native fast path: that drop-in,
        measured alone for as many batches (the advice estimates the job's gain from it)."""
        loader = self.loader
        if not isinstance(loader, DataLoader) or isinstance(loader, chute.DataLoader):
            return
        dropin, kind = dropin_equivalent(loader)
        if dropin is None:
            d.notes.append(f"comparison with the drop-in chute.DataLoader: not run ({kind})")
            return
        d.comparisons.append(
            run_loader(dropin, None, steps=self.steps, warmup=self.warmup, label=f"{DROPIN_LABEL} (fast:{kind})")
        )
