"""chute.Loader: batches from a source, decoded and transformed by native threads."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import torch

from chute import _native
from chute.errors import SampleError
from chute.sources import ImageFolder

_DTYPES = {torch.uint8: "uint8", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _native_transforms(transforms) -> list:
    items = getattr(transforms, "transforms", transforms)  # a Compose-like object, or a list
    if not isinstance(items, Sequence):
        raise TypeError(f"transforms must be a list of chute transforms, got {type(transforms).__name__}")
    out = []
    for t in items:
        if not hasattr(t, "_to_native"):
            raise TypeError(f"{t!r} is not a chute transform (chute.RandomResizedCrop, chute.Resize, ...)")
        out.append(t._to_native())
    return out


class Loader:
    """Iterates over ``(images, labels)`` batches of a source.

    ``images`` is a ``uint8``, ``float32``, ``float16`` or ``bfloat16`` tensor of shape ``(N, 3, H, W)`` (channels-last strides with
    ``memory_format=torch.channels_last``) and ``labels`` an ``int64`` tensor of shape ``(N,)``. Both share
    memory with one of chute's reusable batch buffers, which returns to the pool when both tensors are
    freed: keep ``.clone()`` of what you store.

    Float output is scaled to [0, 1] like ``ToTensor``, then normalised if ``Normalize`` is given, in
    float32, and rounded to float16/bfloat16 as ``tensor.to(dtype)`` would.

    Each ``iter(loader)`` runs one epoch. Epochs count up from 0 by themselves; ``set_epoch(e)`` chooses
    the next one (as with ``DistributedSampler``). Shuffling and augmentation are keyed by
    ``(seed, epoch, sample index)``, so a seed gives the same batches whatever ``num_threads``.

    Images larger than ``max_pixels`` are errors (a decompression-bomb guard). EXIF orientation is ignored,
    as torchvision does, unless ``apply_exif_orientation=True`` (then JPEGs are turned upright like
    ``PIL.ImageOps.exif_transpose``).

    ``scaled_decode=True`` lets JPEGs whose window shrinks at least 2x decode at 1/2, 1/4 or 1/8 scale
    (libjpeg's scaled IDCT): much faster on large photos, with pixels close to, not equal to, PIL's.

    ``on_error='raise'`` raises :class:`chute.SampleError` (index, path, reason) when the batch holding a
    bad sample is reached; ``'skip'`` leaves the sample out, fills the batch from the next samples, and
    records it in :meth:`errors`.
    """

    def __init__(self, source, batch_size: int = 1, *, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, transforms=(), dtype: torch.dtype = torch.uint8,
                 memory_format: torch.memory_format = torch.contiguous_format, num_threads: int | None = None,
                 prefetch: int = 2, on_error: str = "raise", max_pixels: int = 200_000_000,
                 apply_exif_orientation: bool = False, scaled_decode: bool = False):
        if isinstance(source, (str, os.PathLike)):
            source = ImageFolder(source)
        native_source = getattr(source, "_native", None)
        if not isinstance(native_source, _native.Source):
            raise TypeError(f"source must be a chute source (chute.ImageFolder, ...), got {type(source).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype}")
        if memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError("memory_format must be torch.contiguous_format or torch.channels_last")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads <= 0):
            raise ValueError(f"num_threads must be a positive int or None (all cores), got {num_threads!r}")
        if not isinstance(prefetch, int) or prefetch <= 0:
            raise ValueError(f"prefetch must be a positive int (batches), got {prefetch!r}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if not isinstance(max_pixels, int) or max_pixels <= 0:
            raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
        if not 0 <= seed < 2**64:
            raise ValueError("seed must fit in 64 bits")
        self.source = source
        self.batch_size = batch_size
        self.dtype = dtype
        self._epoch = 0
        self._iteration = 0
        self._native = _native.Loader(
            native_source, _native_transforms(transforms), batch_size, bool(shuffle), int(seed), bool(drop_last),
            num_threads or 0, prefetch, _DTYPES[dtype], memory_format == torch.channels_last, on_error, max_pixels,
            bool(apply_exif_orientation), bool(scaled_decode))

    @property
    def num_threads(self) -> int:
        return self._native.num_threads

    def __len__(self) -> int:
        """Batches per epoch (with ``on_error='skip'``, an epoch with bad samples may yield fewer)."""
        return len(self._native)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs; it keys shuffling and augmentation."""
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        self._epoch = int(epoch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._native is None:
            raise RuntimeError("the loader is closed")
        self._iteration += 1
        epoch, self._epoch = self._epoch, self._epoch + 1
        self._native.start_epoch(epoch)
        return self._batches(self._iteration)

    def _batches(self, iteration: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        native = self._native
        while True:
            if iteration != self._iteration:
                raise RuntimeError("this iterator was superseded: a newer iter(loader) restarted the loader")
            try:
                batch = native.next()
            except _native.SampleError:
                index, path, reason, epoch = native.failed_sample()
                raise SampleError(index, path, reason, epoch) from None
            if batch is None:
                return
            yield batch

    def errors(self) -> list[SampleError]:
        """Samples skipped so far (``on_error='skip'``), oldest first."""
        return [SampleError(*e) for e in self._native.errors()] if self._native is not None else []

    def close(self) -> None:
        """Stops the threads. Batches already handed out stay valid. Safe to call twice."""
        if self._native is not None:
            self._native.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        native = getattr(self, "_native", None)
        if native is not None:
            native.close()

    def __repr__(self) -> str:
        return (f"chute.Loader({self.source!r}, batch_size={self.batch_size}, dtype={self.dtype}, "
                f"num_threads={self.num_threads})")
