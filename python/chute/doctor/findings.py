"""The doctor's model: what it found, as data. :class:`Findings` holds every layer's measurements and the
:class:`Verdict`; the rule engine (``verdict.py``, ``advice.py``) builds the verdict from them, and the
views (``report_term.py``, ``report_html.py``) render them. The model imports neither: a diagnosis is data.
``report.Diagnosis`` is what ``chute.doctor`` returns, the findings with their views.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from chute import _native
from chute.doctor.compare import DataLoaderInfo
from chute.doctor.cpu import CpuReport
from chute.doctor.device import DeviceReport
from chute.doctor.measure import Run
from chute.doctor.profile import DatasetProfile
from chute.doctor.remote import RemoteReport
from chute.doctor.storage import StorageReport

WORTH_IT = 1.10  # a change is recommended only when it gains at least 10%
# Measured batches a verdict (or a comparison) needs: the engine's own count (chute/stats.h), under which
# loader.stats() says "not enough batches yet", so the doctor never concludes from fewer.
MIN_VERDICT_BATCHES = _native.MIN_VERDICT_BATCHES


@dataclass
class Recommendation:
    action: str
    gain: float  # expected speed-up (x) of what the step receives
    basis: str  # the numbers behind it
    measured: bool  # a measured run, or an estimate from measured parts

    def __str__(self) -> str:
        kind = "measured" if self.measured else "estimated, at most"
        return f"{self.action}: {self.gain:.1f}x {kind} ({self.basis})"


@dataclass
class Verdict:
    bound: str  # "input", "consumer", "borderline" (the stall's interval straddles the threshold),
    # "loader" (measured alone, without a step) or "unknown" (too few measured batches to tell)
    layer: str  # "storage", "cpu", "remote" (a chute.ray.RemoteLoader's actors) or "consumer"
    stage: str  # the stage within the layer: read, decode, transform, prefetch, cores, actors, transfer, step
    headline: str
    evidence: list[str] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)  # gains of WORTH_IT or more, best first


class StageShares(NamedTuple):
    """Worker time per sample by stage: ms per sample, each stage's share of their sum, and where it was
    measured (empty when nothing was)."""

    ms: dict[str, float]
    shares: dict[str, float]
    where: str


@dataclass
class Findings:
    """Everything the doctor found about one loader: the measured run, the other layers, and the verdict."""

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

    def stage_shares(self) -> StageShares:
        """Per-sample worker time by stage: from chute's stage timers when the loader runs on chute's
        engine, else from the profile of ``dataset[i]``; empty when neither was measured."""
        s = self.run.loader_stats
        if s is not None and s.get("samples"):
            n = s["samples"]
            ms = {k: 1e3 * s[f"{k}_s"] / n for k in ("read", "decode", "transform")}
            where = "chute's stage timers"
        elif self.profile is not None:
            ms = {c: self.profile.ms_per_sample(c) for c in ("read", "decode", "transform", "other")}
            where = f"profile of dataset[i] over {self.profile.samples} samples in this process"
        else:
            return StageShares({}, {}, "")
        total = sum(ms.values())
        return StageShares(ms, {k: v / total if total > 0 else 0.0 for k, v in ms.items()}, where)

    def to_json(self) -> dict:
        """The findings as plain data (JSON-serialisable): images and kept batches left out."""

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
