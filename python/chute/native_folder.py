"""torchvision ImageFolder / DatasetFolder, run by chute's native pipeline (the ``"imagefolder"`` fast path).

A ``torchvision.datasets.ImageFolder`` (or ``DatasetFolder``) qualifies when:

* its ``__getitem__`` is torchvision's (a subclass may add attributes, not change loading);
* ``loader`` is torchvision's ``default_loader`` (with the PIL image backend) or ``pil_loader``: open the file
  and ``.convert("RGB")``, which chute's decoder does for JPEG and PNG (grayscale, CMYK, palette, alpha);
* every file is a ``.jpg``/``.jpeg``/``.png`` (other formats fall back, naming the first such file);
* ``target_transform`` is None;
* ``transform`` is a ``torchvision.transforms.Compose`` of v1 transforms in this shape:
  PIL stage ``RandomResizedCrop`` / ``Resize`` / ``CenterCrop`` (bilinear, antialiased) then at most one
  ``RandomHorizontalFlip``; then ``ToTensor`` (float32 in [0, 1]) or ``PILToTensor`` (uint8), optionally
  ``ConvertImageDtype(torch.float32)`` after ``PILToTensor``, optionally one ``Normalize`` on float32
  (a ``RandomHorizontalFlip`` may also come after the tensor conversion). The output has the dtype and
  NCHW layout the torchvision pipeline gives after ``default_collate``, and labels are int64.

Anything else returns a :class:`~chute.dataloader.fastpath.Fallback` with a one-line reason naming the
transform (or attribute) in the way. Detection is by class name and module (``torchvision.transforms.
transforms``, ``torchvision.datasets.folder``), so torchvision is never imported here.

Order: the DataLoader's own sampler decides it. Each epoch's index batches are materialised and fed to the
native loader as an explicit order (``Loader::start_epoch(epoch, start, order)``), so shuffling,
``generator``, samplers and ``drop_last`` behave as in torch.

Randomness: ``RandomResizedCrop`` and ``RandomHorizontalFlip`` draw from chute's counter-based generator,
keyed by (the epoch's ``base_seed``, sample index), where ``base_seed`` is the seed torch's iterator draws
from ``loader.generator`` (or the global RNG) each epoch. So a ``generator`` (or ``torch.manual_seed``)
makes runs reproducible, whatever the thread count. The crops are *not* the same as torchvision's for a
given seed -- they cannot be: torchvision draws from torch's global RNG in each worker, call by call -- but
follow the same distribution (torchvision's ``get_params``: ten tries, then the clamped centre crop).

Pixels: chute decodes with libjpeg-turbo as PIL does and resizes with PIL's antialiased bilinear
algorithm; against the PIL pipeline (Resize + CenterCrop) uint8 output is within mean absolute error < 1
and max 8 per channel value (tests/test_parity.py, test_fastpath_folder.py), and float32 output within
the same bound divided by 255 and by ``std``.

Errors: a file that fails to decode raises :class:`chute.SampleError` (index, path, reason) at its batch,
where torchvision would raise PIL's own exception.

Memory: batches are the engine's reusable batch buffers, handed to torch without a copy. A consumer that
keeps many of them alive makes the ring grow (it says so once on stderr), up to 4 GiB of buffers; beyond
that the next batch raises an error naming the held buffers, where torch's DataLoader would keep
allocating. ``.clone()`` what you keep.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile

import numpy as np
import torch

import chute
from chute import _native
from chute.dataloader.fastpath import Fallback, Plan, RaiseInPlace
from chute.errors import SampleError

_log = logging.getLogger("chute.dataloader")
_TRANSFORMS = "torchvision.transforms.transforms"
_FOLDER = "torchvision.datasets.folder"
_NATIVE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def _is_tv(obj, names: tuple[str, ...], module: str) -> bool:
    t = type(obj)
    return t.__name__ in names and t.__module__ == module


def _torchvision_base(dataset):
    """torchvision's DatasetFolder in the dataset's class hierarchy, or None."""
    for cls in type(dataset).__mro__:
        if cls.__name__ == "DatasetFolder" and cls.__module__ == _FOLDER:
            return cls
    return None


def plan_folder(loader) -> Plan | Fallback | None:
    """The ``"imagefolder"`` plan for ``loader``; None when its dataset is no torchvision folder dataset."""
    return _plan_dataset(loader.dataset, loader.batch_size or 1)


def _fingerprint(dataset) -> tuple:
    """What a plan is made from, compared by identity each epoch (Plan.batches)."""
    return tuple(getattr(dataset, a, None) for a in ("transform", "target_transform", "loader", "samples"))


def _plan_dataset(dataset, batch_size: int) -> Plan | Fallback | None:
    base = _torchvision_base(dataset)
    if base is None:
        return None
    name = type(dataset).__name__
    if type(dataset).__getitem__ is not base.__getitem__:
        return Fallback(f"{name} overrides __getitem__: its samples are not torchvision's")
    file_loader = getattr(dataset, "loader", None)
    loader_name = getattr(file_loader, "__name__", type(file_loader).__name__)
    if getattr(file_loader, "__module__", None) != _FOLDER or loader_name not in ("default_loader", "pil_loader"):
        return Fallback(f"{name} has a custom loader ({loader_name}): chute decodes only with PIL's semantics")
    if loader_name == "default_loader":
        tv = sys.modules.get("torchvision")
        backend = tv.get_image_backend() if tv is not None and hasattr(tv, "get_image_backend") else "PIL"
        if backend != "PIL":
            return Fallback(f"torchvision's image backend is {backend!r}, not PIL")
    if getattr(dataset, "target_transform", None) is not None:
        return Fallback(f"{name} has a target_transform ({type(dataset.target_transform).__name__}): labels are "
                        "made natively")
    translated = translate(getattr(dataset, "transform", None))
    if isinstance(translated, Fallback):
        return translated
    transforms, dtype = translated
    samples = dataset.samples
    if len(samples) != len(dataset):
        return Fallback(f"len({name}) is {len(dataset)} but it has {len(samples)} samples")
    for path, target in samples:
        if not str(path).lower().endswith(_NATIVE_EXTENSIONS):
            return Fallback(f"{path}: only JPEG and PNG files are decoded natively")
        if "\n" in str(path) or isinstance(target, bool) or not isinstance(target, (int, np.integer)):
            return Fallback(f"sample {path!r} has a label of type {type(target).__name__} or a newline in its path")
    try:
        return FolderPlan(dataset, samples, transforms, dtype, batch_size)
    except ValueError as e:  # a pipeline chute's engine refuses (e.g. no fixed output size)
        return Fallback(f"the transforms do not make a native pipeline: {e}")


def translate(transform):
    """(chute transforms, output dtype) for a torchvision Compose, or a Fallback naming the culprit."""
    if transform is None:
        return Fallback("transform is None: samples are PIL images, which default_collate cannot batch")
    if not _is_tv(transform, ("Compose",), _TRANSFORMS):
        return Fallback(f"transform {type(transform).__name__} is not a torchvision Compose")
    stage = "pil"  # then "uint8" or "float32"
    out: list = []
    flip = normalize = None
    for t in transform.transforms:
        name = type(t).__name__
        if type(t).__module__ != _TRANSFORMS:
            return Fallback(f"transform {name} ({type(t).__module__}) is not a torchvision v1 transform")
        try:
            if name == "RandomHorizontalFlip":
                if flip is not None:
                    return Fallback("two RandomHorizontalFlip transforms: chute flips once")
                flip = chute.RandomHorizontalFlip(t.p)
            elif stage == "pil" and name in ("RandomResizedCrop", "Resize", "CenterCrop"):
                if flip is not None:
                    return Fallback(f"RandomHorizontalFlip before {name}: chute flips after cropping and resizing")
                out.append(_geometric(t, name))
            elif stage == "pil" and name == "ToTensor":
                if torch.get_default_dtype() != torch.float32:
                    return Fallback(f"ToTensor makes {torch.get_default_dtype()} (torch's default dtype): chute "
                                    "makes float32")
                stage = "float32"
            elif stage == "pil" and name == "PILToTensor":
                stage = "uint8"
            elif stage != "pil" and name == "ConvertImageDtype":
                if t.dtype == torch.float32:
                    stage = "float32"  # x / 255 from uint8; a no-op on float32
                elif t.dtype != torch.uint8 or stage != "uint8":
                    return Fallback(f"ConvertImageDtype({t.dtype}) from {stage}: chute converts uint8 to float32 only")
            elif stage == "float32" and name == "Normalize":
                if normalize is not None:
                    return Fallback("two Normalize transforms: chute normalises once")
                normalize = chute.Normalize(_floats(t.mean), _floats(t.std))
            elif name == "Normalize":
                return Fallback(f"Normalize on a {stage} {'PIL image' if stage == 'pil' else 'tensor'}: "
                                "torchvision raises on it")
            else:
                where = "on PIL images" if stage == "pil" else f"on {stage} tensors"
                return Fallback(f"transform {name} {where} has no native equivalent")
        except ValueError as e:  # chute's transforms reject what they cannot reproduce exactly
            return Fallback(f"transform {name}: {e}")
    if stage == "pil":
        return Fallback("the Compose has no ToTensor/PILToTensor: samples stay PIL images, which default_collate "
                        "cannot batch")
    transforms = out + ([flip] if flip is not None else []) + ([normalize] if normalize is not None else [])
    return transforms, torch.float32 if stage == "float32" else torch.uint8


def _floats(v) -> list[float]:
    return [float(x) for x in (v.tolist() if isinstance(v, torch.Tensor) else v)]


def _geometric(t, name: str):
    interpolation, antialias = getattr(t, "interpolation", "bilinear"), getattr(t, "antialias", True)
    if antialias is None:  # torchvision < 0.17's "warn": PIL images are always antialiased
        antialias = True
    if name == "RandomResizedCrop":
        return chute.RandomResizedCrop(tuple(t.size), tuple(t.scale), tuple(t.ratio), interpolation, antialias)
    if name == "Resize":
        if getattr(t, "max_size", None) is not None:
            raise ValueError("max_size is not supported")
        return chute.Resize(t.size if isinstance(t.size, int) else list(t.size), interpolation,
                            antialias=antialias)
    return chute.CenterCrop(tuple(t.size))


class FolderPlan(Plan):
    kind = "imagefolder"

    def __init__(self, dataset, samples, transforms, dtype: torch.dtype, batch_size: int = 1):
        self._dataset = dataset
        self._batch_size = batch_size
        self._made_from = _fingerprint(dataset)
        self._n = len(samples)
        self.dtype = dtype
        self.transforms = transforms
        # The samples as a chute FileList: absolute paths, the dataset's own labels, in its own order.
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
            for path, target in samples:
                f.write(f"{os.path.abspath(path)} {int(target)}\n")
            list_path = f.name
        try:
            self._source = _native.FileList.open(list_path) if self._n else None
        finally:
            os.unlink(list_path)
        self._native_transforms = [t._to_native() for t in transforms]
        self._loaders: dict[int, object] = {}  # batch size -> native loader
        self._epochs = 0
        if self._n:  # the engine for the loader's batch size; it also checks the pipeline (ValueError)
            self._loader_for(batch_size)

    def _loader_for(self, batch_size: int):
        loader = self._loaders.get(batch_size)
        if loader is None:
            loader = _native.Loader(
                self._source, self._native_transforms, batch_size, False, 0, False, 0, 0, 0, 2 << 30,
                "float32" if self.dtype == torch.float32 else "uint8", False, "raise", 200_000_000,
                False, False, 0, 1, False)
            self._loaders[batch_size] = loader
        return loader

    def _fingerprint(self) -> tuple:
        return _fingerprint(self._dataset)

    def _replan(self) -> Plan | Fallback:
        new = _plan_dataset(self._dataset, self._batch_size)
        return Fallback("it is no longer a torchvision folder dataset") if new is None else new

    def _closed(self) -> bool:
        return self._loaders is None

    def _batches(self, index_batches, base_seed):
        if base_seed is None:  # what torch's iterator would have drawn, from the global RNG
            base_seed = torch.empty((), dtype=torch.int64).random_().item()
        epoch = self._epochs
        self._epochs += 1
        batches = [list(b) for b in index_batches]
        if not batches:
            return
        size = len(batches[0])
        if any(len(b) != size for b in batches[:-1]) or len(batches[-1]) > size or size == 0:
            # The native loader cuts one flat order into equal batches. A batch sampler with other sizes
            # gets torch's own path, in this process: the same batches, at PIL speed.
            _log.warning("chute: the batch sampler yields batches of varying sizes; this epoch runs the "
                         "torchvision pipeline in-process instead of natively")
            from torch.utils.data import default_collate
            for b in batches:
                yield default_collate([self._dataset[i] for i in b])
            return
        flat = np.fromiter((i for b in batches for i in b), dtype=np.int64, count=sum(map(len, batches)))
        bad = np.flatnonzero((flat < -self._n) | (flat >= self._n))
        stop = len(flat) if not bad.size else bad[0] // size * size  # deliver the batches before a bad index
        flat = np.where(flat < 0, flat + self._n, flat)[:stop]
        if stop:
            native = self._loader_for(size)
            native.start_epoch(base_seed & (2**64 - 1), 0, np.ascontiguousarray(flat))
            while True:
                try:
                    batch = native.next()
                except _native.SampleError:  # in place of its batch; the epoch goes on, as in torch
                    index, path, reason, _ = native.failed_sample()
                    yield RaiseInPlace(SampleError(index, path, reason, epoch))
                    continue
                if batch is None:
                    break
                images, labels = batch
                yield [images, labels]
                del batch, images, labels
        if bad.size:
            index = int(_flat_at(batches, int(bad[0])))
            raise IndexError(f"index {index} is out of range for a dataset of {self._n} samples")

    def stats(self) -> dict:
        """The native loaders' statistics (chute.LoaderStats fields), summed over batch sizes."""
        out: dict = {}
        for loader in (self._loaders or {}).values():
            for k, v in loader.stats().items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
        return out

    def close(self) -> None:
        loaders, self._loaders = getattr(self, "_loaders", None), None
        for loader in (loaders or {}).values():
            loader.close()


def _flat_at(batches, k: int) -> int:
    for b in batches:
        if k < len(b):
            return b[k]
        k -= len(b)
    raise AssertionError("position outside the epoch")


