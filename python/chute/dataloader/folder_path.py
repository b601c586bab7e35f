"""torchvision ImageFolder / DatasetFolder, run by chute's native pipeline (the ``"imagefolder"`` fast path).

A ``torchvision.datasets.ImageFolder`` (or ``DatasetFolder``) qualifies when:

* its ``__getitem__`` is torchvision's (a subclass may add attributes, not change loading);
* ``loader`` is torchvision's ``default_loader`` (with the PIL image backend) or ``pil_loader``: open the file
  and ``.convert("RGB")``, which chute's decoder does for JPEG, PNG and WebP (grayscale, CMYK, palette, alpha);
  or ``torchvision.io.decode_image`` (plain, or a ``functools.partial`` with ``mode=ImageReadMode.RGB`` or
  ``UNCHANGED``): a uint8 CHW tensor, the same pixels as chute decodes, for JPEG files only (decode_image
  keeps a PNG's alpha and 16-bit samples). With ``UNCHANGED`` it keeps a grayscale or CMYK file's
  channels where chute makes RGB: the first file is checked, and a dataset that mixes them (which torch's
  ``default_collate`` cannot batch) comes out as RGB;
* every file is a ``.jpg``/``.jpeg``/``.png``/``.webp`` (other formats fall back, naming the first such file);
* ``target_transform`` is None;
* ``transform`` is a ``Compose`` (v1 ``torchvision.transforms`` or ``torchvision.transforms.v2``; nested
  Composes are flattened) in this shape: ``RandomResizedCrop`` / ``Resize`` / ``CenterCrop`` (bilinear) on
  the PIL image, or -- v2 only -- on the uint8 tensor after ``ToImage``/``PILToTensor`` or from
  ``decode_image`` (with ``antialias=True``); at most one ``RandomHorizontalFlip`` after them (on a PIL
  image, a ``tv_tensors.Image`` or a tensor); the conversion ``ToTensor`` (float32 in [0, 1]),
  ``PILToTensor`` or ``ToImage`` (uint8), then optionally ``ToDtype(torch.float32, scale=True)`` or
  ``ConvertImageDtype(torch.float32)`` (to [0, 1]) or ``ToDtype(torch.float32)`` (0..255 in float32), and
  optionally one ``Normalize`` on float32. The output has the dtype and NCHW layout the torchvision
  pipeline gives after ``default_collate`` (a plain tensor, also for ``tv_tensors.Image`` samples), and
  labels are int64.

With the reference recipe's ``collate_fn`` (MixUp / CutMix after default_collate, mixing.py), the engine mixes
each finished batch natively and the batch is torchvision's ``(images, soft labels)`` tuple; MixUp needs float32
images (torchvision's raises on uint8), CutMix takes either.

Anything else returns a :class:`~chute.dataloader.base.Fallback` with a one-line reason naming the
transform (or attribute) in the way. Detection is by class name and module (``torchvision.transforms.
transforms``, ``torchvision.transforms.v2.*``, ``torchvision.datasets.folder``, ``torchvision.io.image``),
so torchvision is never imported here.

Order: the DataLoader's own sampler decides it. Each epoch's index batches are materialised and fed to the
native loader as an explicit order (``Loader::start_epoch(epoch, start, order, seed)``), so shuffling,
``generator``, samplers and ``drop_last`` behave as in torch.

Randomness: ``RandomResizedCrop`` and ``RandomHorizontalFlip`` draw from chute's counter-based generator,
keyed by (seed, epoch, sample index): the seed is the epoch's ``base_seed``, which torch's iterator draws
from ``loader.generator`` (or the global RNG) each epoch, passed to the engine as that epoch's seed (all
64 bits); the epoch is the DataLoader's count of epochs. So a ``generator`` (or ``torch.manual_seed``)
makes runs reproducible, whatever the thread count. The crops are *not* the same as torchvision's for a
given seed -- they cannot be: torchvision draws from torch's global RNG in each worker, call by call -- but
follow the same distribution (torchvision's ``get_params``: ten tries, then the clamped centre crop).

Pixels: chute decodes with libjpeg-turbo as PIL does and resizes with PIL's antialiased bilinear
algorithm, in the installed Pillow's order of passes (chute/resampling.py): geometry on PIL images is
bit-exact (test_parity.py, test_torchvision_real.py). v2 geometry on uint8 tensors is torch's antialiased
uint8 resize, which rounds differently: measured max 1 level, on well under 1% of values. The stated
tolerance for both is mean absolute error < 1 and max 8 per channel value (0-255), and for float32 output
the same bound divided by 255 and by ``std``.

Errors: a file that fails to decode raises :class:`chute.SampleError` (index, path, reason) at its batch,
where torchvision would raise PIL's own exception. With ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True``
(read when the epoch starts), a JPEG whose data ends early decodes as PIL decodes it, the missing part
gray; a file cut inside its header still raises, as in PIL. The decompression-bomb guard is PIL's too:
an image over twice ``PIL.Image.MAX_IMAGE_PIXELS`` pixels raises (None: no limit).

Memory: image batches are the engine's reusable batch buffers, handed to torch without a copy; labels
are their own small tensors, so keeping labels holds no image memory. A consumer that keeps image
batches alive makes the ring grow (it says so once on stderr), up to the prefetch budget (the engine's
``max_memory``, 2 GiB: ``_ring_bytes``). Beyond that, as with torch's DataLoader, keeping batches never
fails: each further batch is copied into a fresh tensor (a warning says so once) and its buffer goes
straight back to the ring, so the memory the consumer keeps is ordinary tensor memory, freed when it lets
go.

Prefetch: with an explicit ``prefetch_factor``, the engine prepares ``prefetch_factor * num_workers`` batches
ahead of the consumer, as torch's workers would (``stats()["prefetch"]``, ``auto_prefetch`` False; lowered
to what ``max_memory`` holds, with the engine's warning). Without one, prefetch is automatic: it grows
while the workers idle and the consumer waits, within the memory budget.
"""

from __future__ import annotations

import functools
import logging
import os
import sys

import numpy as np
import torch

from chute import _native, _options
from chute._options import DEFAULTS
from chute.dataloader import mixing
from chute.dataloader.base import Fallback, Plan, RaiseInPlace
from chute.dataloader.translate import translate
from chute.errors import SampleError

_log = logging.getLogger("chute.dataloader")
_FOLDER = "torchvision.datasets.folder"
_IO = "torchvision.io.image"
_NATIVE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
_JPEG_EXTENSIONS = (".jpg", ".jpeg")
_PIL_MAX_IMAGE_PIXELS = int(1024 * 1024 * 1024 // 4 // 3)  # PIL.Image.MAX_IMAGE_PIXELS's default


def _ring_bytes(options) -> int:
    """The most the ring of batch buffers may hold: the prefetch budget (``max_memory``), which auto prefetch
    may use anyway. Batches kept by the consumer beyond it are copied out instead (FolderPlan._own_if_ring_full)."""
    return options.max_memory


def _torchvision_base(dataset):
    """torchvision's DatasetFolder in the dataset's class hierarchy, or None."""
    for cls in type(dataset).__mro__:
        if cls.__name__ == "DatasetFolder" and cls.__module__ == _FOLDER:
            return cls
    return None


def _fingerprint(dataset) -> tuple:
    """What a plan is made from, compared by identity each epoch (Plan.batches), and PIL's
    LOAD_TRUNCATED_IMAGES flag and MAX_IMAGE_PIXELS (so an epoch after the user sets them follows them)."""
    return tuple(getattr(dataset, a, None) for a in ("transform", "target_transform", "loader", "samples")) + (
        pil_load_truncated_images(),
        pil_max_pixels(),
    )


def pil_max_pixels() -> int:
    """PIL's decompression-bomb limit, which torchvision's loader meets in ``Image.open``: an error above
    twice ``PIL.Image.MAX_IMAGE_PIXELS``, none when it is None. The fast path applies the same one."""
    image = sys.modules.get("PIL.Image")
    limit = getattr(image, "MAX_IMAGE_PIXELS", _PIL_MAX_IMAGE_PIXELS) if image is not None else _PIL_MAX_IMAGE_PIXELS
    return 2**63 - 1 if limit is None else 2 * int(limit)


def pil_load_truncated_images() -> bool:
    """``PIL.ImageFile.LOAD_TRUNCATED_IMAGES``: with it, PIL decodes a JPEG whose data ends early (the rest
    gray), and so does chute. PIL is not imported for this: if it is not loaded, nobody set the flag."""
    image_file = sys.modules.get("PIL.ImageFile")
    return bool(getattr(image_file, "LOAD_TRUNCATED_IMAGES", False))


def plan_dataset(
    dataset, batch_size: int, prefetch: int = 0, batch_transform: mixing.BatchTransform | None = None
) -> Plan | Fallback | None:
    """The ``"imagefolder"`` plan for ``dataset`` (e.g. the dataset of a ``Subset``); None when it is no
    torchvision folder dataset. ``prefetch``: the engine's batches ahead (``prefetch_factor * num_workers``
    when the DataLoader was given a prefetch_factor), 0 for automatic prefetch. ``batch_transform``: the
    collate_fn's MixUp / CutMix (mixing.py), run on each finished batch."""
    base = _torchvision_base(dataset)
    if base is None:
        return None
    name = type(dataset).__name__
    if type(dataset).__getitem__ is not base.__getitem__:
        return Fallback(f"{name} overrides __getitem__: its samples are not torchvision's")
    source = _file_loader(name, getattr(dataset, "loader", None))
    if isinstance(source, Fallback):
        return source
    pipeline = native_pipeline(dataset, "pil" if source == "pil" else "tensor", batch_transform)
    if isinstance(pipeline, Fallback):
        return pipeline
    transforms, dtype = pipeline
    samples = dataset.samples
    if len(samples) != len(dataset):
        return Fallback(f"len({name}) is {len(dataset)} but it has {len(samples)} samples")
    extensions = _NATIVE_EXTENSIONS if source == "pil" else _JPEG_EXTENSIONS
    for path, target in samples:
        if not os.fsdecode(path).lower().endswith(extensions):
            if source == "pil":
                return Fallback(f"{path}: only JPEG, PNG and WebP files are decoded natively")
            return Fallback(
                f"{path}: with loader=decode_image chute takes JPEG files only (decode_image keeps a "
                "PNG's alpha channel and 16-bit samples, chute's decoder makes 8-bit RGB)"
            )
        if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
            return Fallback(f"sample {path!r} has a label of type {type(target).__name__}, not an integer")
    if source == "pil" and pil_load_truncated_images():
        # chute decodes a truncated JPEG as PIL does under this flag, not yet a truncated PNG or WebP: such a
        # dataset runs torch's path, which never fails where PIL would load the file.
        other = next((path for path, _ in samples if os.fsdecode(path).lower().endswith((".png", ".webp"))), None)
        if other is not None:
            return Fallback(
                f"PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set and {other} is a PNG or WebP file: chute "
                "loads truncated JPEGs as PIL does under that flag, not truncated PNG or WebP files",
                hint="leave LOAD_TRUNCATED_IMAGES unset (a truncated file then raises, naming it) to "
                "take the fast path",
            )
    if source == "decode_image_unchanged" and samples:
        mode = _jpeg_mode(samples[0][0])
        if mode != "RGB":
            return Fallback(
                f"{samples[0][0]} is a {mode} JPEG: decode_image (mode UNCHANGED) keeps its channels, "
                "chute makes RGB; pass loader=functools.partial(decode_image, mode=ImageReadMode.RGB)"
            )
    try:
        return FolderPlan(
            dataset,
            file_list(samples),
            transforms,
            dtype,
            batch_size,
            pil=source == "pil",
            prefetch=prefetch,
            batch_transform=batch_transform,
        )
    except ValueError as e:  # a pipeline chute's engine refuses (e.g. no fixed output size)
        return Fallback(f"the transforms do not make a native pipeline: {e}")


def file_list(samples):
    """The samples as a chute FileList, in memory: absolute paths, the dataset's own labels, in its own order. A
    name that is not UTF-8 (os.fsdecode'd by os.scandir, or bytes) crosses as its bytes. None when empty."""
    if not samples:
        return None
    return _native.FileList.from_entries(
        [os.path.abspath(path) for path, _ in samples], [int(target) for _, target in samples], os.getcwd()
    )


def native_pipeline(dataset, source: str, batch_transform: mixing.BatchTransform | None):
    """(chute transforms, output dtype) for a dataset's ``transform`` and ``target_transform`` (torchvision's
    attributes) on images from ``source`` ("pil" or "tensor", as translate() takes it), with the
    collate_fn's MixUp / CutMix; or a Fallback naming what is in the way."""
    name = type(dataset).__name__
    if getattr(dataset, "target_transform", None) is not None:
        return Fallback(
            f"{name} has a target_transform ({type(dataset.target_transform).__name__}): labels are made natively"
        )
    translated = translate(getattr(dataset, "transform", None), source)
    if isinstance(translated, Fallback):
        return translated
    if batch_transform is not None and batch_transform.has_mixup and translated[1] != torch.float32:
        return Fallback(
            f"MixUp after default_collate on {translated[1]} images: torchvision's MixUp multiplies them in place, "
            "which raises for integer images (so does this DataLoader's generic path)",
            "convert to float32 in the transform (ToDtype(torch.float32, scale=True) or ToTensor)",
        )
    return translated


def _file_loader(name: str, file_loader) -> str | Fallback:
    """How the dataset's loader reads a file, when chute's decoder gives the same pixels: "pil" (torchvision's
    default_loader with the PIL backend, or pil_loader: PIL's .convert("RGB")), "decode_image_rgb" or
    "decode_image_unchanged" (torchvision.io.decode_image, a uint8 CHW tensor; maybe through
    functools.partial with mode= and apply_exif_orientation=False)."""
    func, keywords = file_loader, {}
    if isinstance(file_loader, functools.partial) and not file_loader.args:
        func, keywords = file_loader.func, dict(file_loader.keywords)
    loader_name = getattr(func, "__name__", type(func).__name__)
    module = getattr(func, "__module__", None)
    if module == _FOLDER and loader_name in ("default_loader", "pil_loader") and not keywords:
        if loader_name == "default_loader":
            tv = sys.modules.get("torchvision")
            backend = tv.get_image_backend() if tv is not None and hasattr(tv, "get_image_backend") else "PIL"
            if backend != "PIL":
                return Fallback(f"torchvision's image backend is {backend!r}, not PIL")
        return "pil"
    if module == _IO and loader_name == "decode_image":
        if keywords.pop("apply_exif_orientation", False):
            return Fallback(
                "decode_image(apply_exif_orientation=True): chute's fast path decodes without applying EXIF orientation"
            )
        mode = keywords.pop("mode", "UNCHANGED")
        mode = str(getattr(mode, "name", mode)).upper()
        if keywords:
            return Fallback(f"decode_image with {sorted(keywords)}: chute knows mode= and apply_exif_orientation=")
        if mode == "RGB":
            return "decode_image_rgb"
        if mode == "UNCHANGED":
            return "decode_image_unchanged"
        return Fallback(f"decode_image(mode={mode}): chute decodes to RGB only")
    return Fallback(
        f"{name} has a custom loader ({loader_name}): chute decodes only as PIL's .convert('RGB') or "
        "torchvision.io.decode_image do"
    )


def _jpeg_mode(path) -> str:
    """PIL's mode for a JPEG, from its header only ("RGB", "L", "CMYK"), or why it cannot be read."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.mode
    except Exception as e:  # noqa: BLE001  (the reason goes into the fallback message)
        return f"unreadable ({type(e).__name__})"


class FolderPlan(Plan):
    kind = "imagefolder"
    held_batches = (
        f"engine batch ring: an image batch is a ring buffer lent to torch without a copy, back to "
        f"the ring when the batch dies; the ring grows while the consumer keeps batches, up to "
        f"{DEFAULTS.max_memory >> 20} MiB, then further batches are copied into fresh tensors; labels are "
        f"their own tensors"
    )

    def __init__(
        self,
        dataset,
        source,
        transforms,
        dtype: torch.dtype,
        batch_size: int = 1,
        pil: bool = True,
        prefetch: int = 0,
        batch_transform: mixing.BatchTransform | None = None,
    ):
        self._dataset = dataset
        self._batch_size = batch_size
        self._batch_transform = batch_transform  # the collate_fn's MixUp / CutMix, or None
        if batch_transform is not None:
            self.collate = functools.partial(mixing.collate, batch_transform.transform)
        self._prefetch = prefetch  # batches ahead, 0: automatic (the engine's LoaderOptions.prefetch)
        self._made_from = self._fingerprint()
        # PIL's LOAD_TRUNCATED_IMAGES and decompression-bomb limit where the dataset reads files with PIL;
        # torchvision.io.decode_image has neither (chute's default guard then).
        self._accept_truncated, self._max_pixels = (
            (pil_load_truncated_images(), pil_max_pixels()) if pil else (DEFAULTS.accept_truncated, DEFAULTS.max_pixels)
        )
        # The native source the engine reads (a FileList of the dataset's samples, or a chute dataset's own
        # source), in the dataset's order; None for an empty dataset.
        self._source = source
        self._n = len(source) if source is not None else 0
        self.dtype = dtype
        self.transforms = transforms
        self._native_transforms = _options.native_transforms(transforms)
        self._loaders: dict[int, object] = {}  # batch size -> native loader
        self._warned_copy = False
        if self._n:  # the engine for the loader's batch size; it also checks the pipeline (ValueError)
            self._loader_for(batch_size)

    def _loader_for(self, batch_size: int):
        loader = self._loaders.get(batch_size)
        if loader is None:
            options = _options.build(
                batch_size=batch_size,
                dtype=torch.float32 if self.dtype == torch.float32 else torch.uint8,
                on_error=self.on_error,
                prefetch=self._prefetch or DEFAULTS.prefetch,
                max_pixels=self._max_pixels,
                accept_truncated=self._accept_truncated,
                rank=0,  # the DataLoader's sampler gives this process its share (DistributedSampler)
                world_size=1,
            ).loader
            options.max_ring_bytes = _ring_bytes(options)
            self._ring_mib = options.max_ring_bytes >> 20
            mix = self._batch_transform.native if self._batch_transform is not None else None
            loader = _native.Loader(self._source, self._native_transforms, options, batch_mix=mix)
            # e.g. prefetch_factor * num_workers batches ahead, lowered to what max_memory holds
            _options.warn_notices(loader, stacklevel=3, prefix="chute.DataLoader (prefetch_factor * num_workers): ")
            self._loaders[batch_size] = loader
        return loader

    def _fingerprint(self) -> tuple:
        return _fingerprint(self._dataset)

    def _replan(self) -> Plan | Fallback:
        new = plan_dataset(self._dataset, self._batch_size, self._prefetch, self._batch_transform)
        return Fallback("it is no longer a torchvision folder dataset") if new is None else new

    def _closed(self) -> bool:
        return self._loaders is None

    def _batches(self, index_batches, base_seed, epoch):
        if base_seed is None:  # what torch's iterator would have drawn, from the global RNG
            base_seed = torch.empty((), dtype=torch.int64).random_().item()
        batches = [list(b) for b in index_batches]
        if not batches:
            return
        size = len(batches[0])
        if any(len(b) != size for b in batches[:-1]) or len(batches[-1]) > size or size == 0:
            # The native loader cuts one flat order into equal batches. A batch sampler with other sizes
            # gets torch's own path, in this process: the same batches, at PIL speed.
            _log.warning(
                "chute: the batch sampler yields batches of varying sizes; this epoch runs the "
                "torchvision pipeline in-process instead of natively"
            )
            for b in batches:
                yield self.collate([self._dataset[i] for i in b])
            return
        flat = np.fromiter((i for b in batches for i in b), dtype=np.int64, count=sum(map(len, batches)))
        bad = np.flatnonzero((flat < -self._n) | (flat >= self._n))
        stop = len(flat) if not bad.size else bad[0] // size * size  # deliver the batches before a bad index
        flat = np.where(flat < 0, flat + self._n, flat)[:stop]
        if stop:
            native = self._loader_for(size)
            native.start_epoch(epoch, 0, np.ascontiguousarray(flat), seed=base_seed & (2**64 - 1))
            while True:
                try:
                    batch = native.next()
                except SampleError as e:  # in place of its batch; the epoch goes on, as in torch
                    reason = e.reason
                    if "(max_pixels" in reason:  # the limit the user sets here is PIL's
                        reason += (
                            "; on the DataLoader fast path the limit is twice PIL.Image.MAX_IMAGE_PIXELS, "
                            "as in PIL: set that (None: no limit) to change it"
                        )
                    yield RaiseInPlace(SampleError(e.index, e.path, reason, epoch))
                    continue
                if batch is None:
                    break
                images, labels, *mix = batch
                del batch
                images = self._own_if_ring_full(native, images)
                if mix:  # (kind, lam, label_lam, box): the engine mixed the images; the labels follow
                    try:
                        soft = mixing.mix_labels(labels, self._batch_transform.num_classes, mix[0][2])
                    except Exception as e:  # a label outside num_classes: one_hot raises, as in torchvision
                        yield RaiseInPlace(e)
                        continue
                    yield images, soft  # torchvision's MixUp / CutMix return a tuple
                    del soft
                else:
                    yield [images, labels]
                del images, labels
        if bad.size:
            index = int(_flat_at(batches, int(bad[0])))
            raise IndexError(f"index {index} is out of range for a dataset of {self._n} samples")

    def _own_if_ring_full(self, native, images: torch.Tensor) -> torch.Tensor:
        """``images``, or a copy of it in fresh memory when the consumer keeps so many batches that the ring
        would run out of buffers to work in. torch's DataLoader never fails for batches kept; neither does
        this: the copy is ordinary tensor memory, and the ring buffer goes back as the original is dropped."""
        held, max_slots = native.ring_usage()
        reserve = max(1, min(native.prefetch + 1, max_slots - 2))  # buffers the engine keeps to work in
        if held <= max_slots - reserve:
            return images
        if not self._warned_copy:
            self._warned_copy = True
            _log.warning(
                "chute: the consumer keeps %d image batches alive, more than the batch ring's %d buffers "
                "(%d MiB) leave room for; further batches are copied into fresh tensors, as torch's "
                "DataLoader would allocate them",
                held,
                max_slots,
                self._ring_mib,
            )
        return images.clone()

    def stats(self) -> dict:
        """The native loaders' statistics (chute.LoaderStats fields): counters summed over batch sizes,
        settings (threads, prefetch, cores, ...) the largest, auto flags only where every engine is auto, and
        chute's verdict on the sums. ``elapsed_s`` and ``process_cpu_s`` are the largest too: every engine
        measures the same wall clock and the same process, so their sum would count that time twice (and
        halve the cores the verdict sees busy)."""
        largest = (
            "threads",
            "active_threads",
            "prefetch",
            "max_prefetch",
            "cores",
            "batch_buffer_bytes",
            "batch_buffer_held_bytes",
            "batch_buffers",
            "elapsed_s",
            "process_cpu_s",
            "mean_ready_batches",
        )
        out: dict = {}
        for loader in (self._loaders or {}).values():
            for k, v in loader.stats().items():
                if isinstance(v, bool):  # auto_threads, auto_prefetch: auto only if every engine is
                    out[k] = out.get(k, True) and v
                elif isinstance(v, (int, float)):
                    out[k] = max(out.get(k, 0), v) if k in largest else out.get(k, 0) + v
        if out:
            total = out["wait_s"] + out["consumer_s"]
            out["stall_fraction"] = out["wait_s"] / total if total > 0 else 0.0
            out.update(_native.diagnose(out))
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
