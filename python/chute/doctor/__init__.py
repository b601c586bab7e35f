"""``chute doctor``: finds where a training job's input pipeline stalls, and says what to change.

``chute.doctor(loader, step_fn)`` is :func:`chute.doctor.api.doctor`; ``chute.doctor.watch(loader)`` wraps a
loader in a script's own loop. One concept per module: ``measure`` (the timed run), ``storage``, ``cpu``,
``device`` (NVML through ctypes), ``remote`` (a chute.ray.RemoteLoader's actors), ``profile`` (where
``dataset[i]`` spends its time), ``compare`` (the DataLoader's settings and the loaders measured beside it),
``verdict``, ``report`` (the result) and its renderings ``report_term`` and ``report_html``.

This package is itself callable, so that ``chute.doctor`` (which ``import chute`` loads lazily, and which the
import system binds to this package) is both ``chute.doctor(loader, step_fn)`` and ``chute.doctor.watch``.
"""

import sys
import types

# The doctor asks isinstance(loader, chute.DataLoader) inside its measured loops (engine_stats at the first
# measured batch): the drop-in, which `import chute` loads lazily, loads with the doctor, not during a measurement.
import chute.dataloader  # noqa: F401
from chute.doctor.api import Watch, doctor, run_script, watch
from chute.doctor.report import Diagnosis
from chute.doctor.verdict import Recommendation, Verdict

__all__ = ["Diagnosis", "Recommendation", "Verdict", "Watch", "doctor", "run_script", "watch"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return doctor(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
