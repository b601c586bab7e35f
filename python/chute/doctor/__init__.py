"""``chute doctor``: finds where a training job's input pipeline stalls, and says what to change.

``chute.doctor(loader, step_fn)`` is :func:`chute.doctor.api.doctor`; ``chute.doctor.watch(loader)`` wraps a
loader in a script's own loop (``watching``). One concept per module, in layers:

* the measurements: ``measure`` (the timed run), ``storage``, ``cpu``, ``device`` (NVML through ctypes),
  ``remote`` (a chute.ray.RemoteLoader's actors), ``profile`` (where ``dataset[i]`` spends its time),
  ``compare`` (the DataLoader's settings and the loaders measured beside it);
* the model: ``findings`` (:class:`Findings`, :class:`Verdict`, :class:`Recommendation`: data only);
* the rule engine, which builds the verdict from the findings: ``verdict`` and ``advice`` (the changes);
* the views, which render the findings and import nothing above the model: ``report_term`` and
  ``report_html``;
* on top: ``report`` (:class:`Diagnosis`, the findings with their views), ``investigation`` (what doctor()
  and watch() share), ``watching`` (:class:`Watch`) and ``api``.

This package is itself callable, so that ``chute.doctor`` (which ``import chute`` loads lazily, and which the
import system binds to this package) is both ``chute.doctor(loader, step_fn)`` and ``chute.doctor.watch``.
"""

import sys
import types

# The doctor asks isinstance(loader, chute.DataLoader) inside its measured loops (engine_stats at the first
# measured batch): the drop-in, which `import chute` loads lazily, loads with the doctor, not during a measurement.
import chute.dataloader  # noqa: F401
from chute.doctor.api import doctor, run_script, watch
from chute.doctor.findings import Findings, Recommendation, Verdict
from chute.doctor.report import Diagnosis
from chute.doctor.watching import Watch

__all__ = ["Diagnosis", "Findings", "Recommendation", "Verdict", "Watch", "doctor", "run_script", "watch"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return doctor(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
