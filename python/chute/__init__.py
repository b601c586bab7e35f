"""chute: keeps GPUs fed. A C++20 input pipeline for PyTorch.

>>> import chute
>>> source = chute.ImageFolder("/data/imagenet/train")
>>> loader = chute.Loader(source, batch_size=256, shuffle=True, dtype=torch.float32, transforms=[
...     chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
...     chute.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
>>> for images, labels in loader:
...     ...

Packed shards: ``chute.pack("/data/imagenet/train", "/data/train.chute")`` once, then
``chute.open("/data/train.chute")`` in place of the ImageFolder (also reads tar / WebDataset shards).
"""

__version__ = "0.1.0"  # the one place: pyproject.toml reads it from here

import os as _os

from torch.utils.data import get_worker_info  # torch's own (chute's workers set it); torch imports it anyway

from chute._resume_state import merge as merge_state_dicts
from chute.errors import ResourceError, SampleError
from chute.formats import LMDBDataset, TFRecordDataset
from chute.loader import Loader
from chute.packed import pack
from chute.resolve import open
from chute.sources import FileList, ImageFolder, PackedDataset, TarDataset
from chute.stats import LoaderStats
from chute.transforms import CenterCrop, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize


def __getattr__(name: str):
    """The drop-in DataLoader and the doctor load on first use (PEP 562): ``import chute`` for
    ``chute.Loader`` alone does not pay for them. ``chute.doctor`` is the package, and it is callable:
    ``chute.doctor(loader, step_fn)``, ``chute.doctor.watch(loader)``."""
    if name == "DataLoader":
        from chute.dataloader import DataLoader

        globals()["DataLoader"] = DataLoader
        return DataLoader
    if name == "doctor":
        import importlib

        return importlib.import_module("chute.doctor")  # which also binds it here, as any submodule
    raise AttributeError(f"module 'chute' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"DataLoader", "doctor"})


# CHUTE_DOCTOR=1: watch the first loader this process iterates (for jobs the CLI cannot wrap, such as
# torchrun). Only then is the doctor imported and the hook installed; unset, import chute installs nothing.
if _os.environ.get("CHUTE_DOCTOR", "").strip() not in ("", "0"):
    from chute.doctor.api import watch_from_environment as _watch_from_environment

    _watch_from_environment()


__all__ = [
    "CenterCrop",
    "DataLoader",
    "FileList",
    "ImageFolder",
    "LMDBDataset",
    "Loader",
    "LoaderStats",
    "Normalize",
    "PackedDataset",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ResourceError",
    "SampleError",
    "TFRecordDataset",
    "TarDataset",
    "doctor",
    "get_worker_info",
    "merge_state_dicts",
    "open",
    "pack",
]
