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

from chute.errors import SampleError
from chute.loader import Loader
from chute.packed import FileList, PackedDataset, TarDataset, open, pack
from chute.sources import ImageFolder
from chute.transforms import CenterCrop, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize

__version__ = "0.1.0"

__all__ = [
    "CenterCrop",
    "FileList",
    "ImageFolder",
    "Loader",
    "Normalize",
    "PackedDataset",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "SampleError",
    "TarDataset",
    "open",
    "pack",
]
