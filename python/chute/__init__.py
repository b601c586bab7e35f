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

from chute.dataloader import DataLoader, get_worker_info
from chute.errors import ResourceError, SampleError
from chute.loader import Loader
from chute.packed import FileList, PackedDataset, TarDataset, open, pack
from chute.sources import ImageFolder
from chute.stats import LoaderStats
from chute.transforms import CenterCrop, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize

# chute.doctor is the function (chute.doctor.watch hangs off it); its package stays importable as
# chute.doctor.<module> through sys.modules ("from chute.doctor.storage import probe_storage").
from chute.doctor import doctor  # noqa: E402  (needs Loader and the sources above)
from chute.doctor.api import watch_from_environment as _watch_from_environment  # noqa: E402

_watch_from_environment()  # CHUTE_DOCTOR=1: watch the first loader this process iterates


__all__ = [
    "CenterCrop",
    "DataLoader",
    "FileList",
    "ImageFolder",
    "Loader",
    "LoaderStats",
    "Normalize",
    "PackedDataset",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ResourceError",
    "SampleError",
    "TarDataset",
    "doctor",
    "get_worker_info",
    "open",
    "pack",
]
