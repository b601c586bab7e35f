"""What ``chute.doctor`` returns: every measurement, the verdict, and the ways to show them."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from chute.doctor.compare import DataLoaderInfo
from chute.doctor.cpu import CpuReport
from chute.doctor.device import DeviceReport
from chute.doctor.measure import Run
from chute.doctor.profile import DatasetProfile
from chute.doctor.remote import RemoteReport
from chute.doctor.storage import StorageReport
from chute.doctor.verdict import Verdict


@dataclass
class Diagnosis:
    """The doctor's findings for one loader. ``print(d)`` gives the terminal summary, ``d.save_html(path)``
    the self-contained report with plots, ``d.to_json()`` a plain dict."""

    target: str  # what was diagnosed, in words
    run: Run  # the loader as given, with the step (or alone)
    comparisons: list[Run] = field(default_factory=list)  # the other loaders measured the same way
    notes: list[str] = field(default_factory=list)  # what was not measured, and why
    dataloader: DataLoaderInfo | None = None
    profile: DatasetProfile | None = None
    storage: StorageReport | None = None
    cpu: CpuReport | None = None
    device: DeviceReport | None = None
    remote: RemoteReport | None = None  # a chute.ray.RemoteLoader's actors over the measured steps
    batches_per_epoch: int | None = None
    sweep_png: bytes | None = None  # ``chute bench --sweep``'s plot, when it was run
    verdict: Verdict | None = None

    def __str__(self) -> str:
        from chute.doctor.report_term import render_text

        return render_text(self)

    def print(self, console=None) -> None:
        """The summary on a rich console (stdout by default), with colour where the terminal has it."""
        from chute.doctor.report_term import render

        render(self, console)

    def save_html(self, path: str | Path) -> Path:
        """Writes the text diagnosis beside ``path`` (``.txt``) first, so that nothing measured is lost, then
        the HTML report (with plots where matplotlib is installed, else with a note saying so)."""
        from chute.doctor.report_html import write_html

        path = Path(path)
        path.with_suffix(".txt").write_text(str(self), encoding="utf-8")
        return write_html(self, path)

    def to_json(self) -> dict:
        def plain(value):
            if dataclasses.is_dataclass(value):
                return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
            if isinstance(value, dict):
                return {str(k): plain(v) for k, v in value.items()}
            if isinstance(value, (list, tuple, set)):
                return [plain(v) for v in value]
            if isinstance(value, (bytes, torch.Tensor)):
                return None  # images stay in the HTML report; the kept batch is not a finding
            return value

        out = plain(self)
        for run in [out["run"], *out["comparisons"]]:
            del run["sample"]
        out["run"] |= {"stall_fraction": self.run.stall_fraction, "samples_per_s": self.run.rate}
        for c, run in zip(out["comparisons"], self.comparisons):
            c["samples_per_s"] = run.rate
        json.dumps(out)  # fail here, not in the caller, if something is not plain
        return out
