"""What ``import chute`` loads: the engine's front door only. The drop-in DataLoader and the doctor load when
first touched (PEP 562 ``__getattr__`` in chute/__init__.py), and no environment hook is installed unless
CHUTE_DOCTOR asks for one. Each check runs in a fresh interpreter, since this one has imported everything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LAZY = (
    "chute.doctor",
    "chute.doctor.api",
    "chute.dataloader",
    "chute.dataloader.worker",
    "chute.dataloader.iterator",
    "chute.dataloader.plan",
    "chute.dataloader.folder_path",
    "chute.bench",
    "chute.inspection",  # numpy's percentiles and PIL, for `chute inspect`
    "chute.cli",
)


def _child(code: str, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "CHUTE_DOCTOR"} | env
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environ)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_chute_leaves_the_doctor_and_the_dataloader_unloaded():
    out = _child(
        "import json, sys, chute, torch.utils.data\n"
        "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.startswith('chute')),"
        " 'hooked': torch.utils.data.DataLoader.__iter__.__name__ != '__iter__'"
        " or chute.Loader.__iter__.__name__ != '__iter__'}))"
    )
    assert not set(LAZY) & set(out["loaded"]), out["loaded"]
    assert "chute.loader" in out["loaded"]
    assert out["hooked"] is False  # no CHUTE_DOCTOR: nothing patched


def test_lazy_names_work_when_touched():
    out = _child(
        "import json, sys, chute, torch\n"
        "from chute.dataloader.loader import DataLoader\n"
        "from chute.doctor.api import doctor, watch\n"
        "dl = chute.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 2)), batch_size=2)\n"
        "print(json.dumps({'dataloader': chute.DataLoader is DataLoader, 'batches': len(list(dl)),"
        " 'callable': callable(chute.doctor), 'watch': chute.doctor.watch is watch,"
        " 'worker_info': chute.get_worker_info is torch.utils.data.get_worker_info,"
        " 'dir': {'DataLoader', 'doctor'} <= set(dir(chute)),"
        " 'doctor_runs': chute.doctor([torch.zeros(2, 3)] * 4, steps=2, warmup=1, storage=False,"
        " compare=False, profile=False).run.samples}))"
    )
    assert out == {
        "dataloader": True,
        "batches": 2,
        "callable": True,
        "watch": True,
        "worker_info": True,
        "dir": True,
        "doctor_runs": 4,
    }


def test_the_doctor_stays_callable_when_a_submodule_is_imported_first():
    """``import chute.doctor.storage`` binds chute.doctor to the package: the package itself is callable."""
    out = _child(
        "import json, chute.doctor.storage, chute, torch\n"
        "d = chute.doctor([torch.zeros(2, 3)] * 3, steps=1, warmup=1, storage=False, compare=False)\n"
        "print(json.dumps({'samples': d.run.samples, 'module': type(chute.doctor).__mro__[1].__name__}))"
    )
    assert out == {"samples": 2, "module": "module"}


def test_an_unknown_attribute_is_an_attribute_error():
    import chute

    with pytest.raises(AttributeError, match="no attribute 'DataLoder'"):
        chute.DataLoder  # noqa: B018


def test_chute_doctor_environment_variable_installs_the_hook():
    out = _child(
        "import json, sys, chute, torch.utils.data\n"
        "print(json.dumps({'doctor': 'chute.doctor' in sys.modules,"
        " 'hooked': torch.utils.data.DataLoader.__iter__.__name__ == 'patched'}))",
        CHUTE_DOCTOR="1",
    )
    assert out == {"doctor": True, "hooked": True}


def test_the_doctor_loads_the_dataloader_before_it_measures():
    """The doctor's measured loops ask isinstance(loader, chute.DataLoader): importing the drop-in there
    would be charged to a batch's wait."""
    out = _child(
        "import json, sys, chute\n"
        "chute.doctor.watch\n"
        "print(json.dumps({'dataloader': 'chute.dataloader.loader' in sys.modules}))"
    )
    assert out == {"dataloader": True}


def test_the_doctor_on_a_torch_dataloader_does_not_import_ray():
    """The doctor knows chute.ray.RemoteLoader (doctor/remote.py) without importing Ray for other loaders."""
    out = _child(
        "import json, sys, chute, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "dl = DataLoader(TensorDataset(torch.zeros(12, 3)), batch_size=2)\n"
        "d = chute.doctor(dl, lambda batch: None, steps=2, warmup=1, max_steps=2)\n"
        "watched = sum(1 for _ in chute.doctor.watch(dl, steps=2, warmup=1, max_steps=2))\n"
        "print(json.dumps({'ray': sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'chute.ray'))),"
        " 'remote': d.remote, 'watched': watched}))"
    )
    assert out == {"ray": [], "remote": None, "watched": 6}
