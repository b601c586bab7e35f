"""One description of the engine for every front door.

``chute.Loader``, ``chute.ray.RemoteLoader`` and ``chute.DataLoader``'s ImageFolder fast path describe the
engine with the same objects: ``chute._native.LoaderOptions`` (with its ``DecodeOptions``) and
``DeliveryOptions``, the C++ structs (engine/loader.h, engine/processor.h, gpu/delivery.h) where every
default, range and check is written once. :func:`build` turns a door's keyword arguments into them, once:
torch dtypes and memory formats into the engine's names, ``validate='window'|'full'`` into
``DecodeOptions.validate_full``, ``rank``/``world_size`` from ``torch.distributed`` or torchrun's environment.
The objects pickle by field name, so a door that runs the engine elsewhere (RemoteLoader's actors) ships
them whole and the engine there is built from exactly what the driver checked.

:data:`DEFAULTS` holds each keyword's default as a door's signature shows it (``num_threads='auto'``,
``dtype=torch.uint8``), read from the structs: a door writes ``max_memory=DEFAULTS.max_memory``, never a
literal, and test_seams.py checks that every door takes every keyword with these defaults and hands it to
:func:`build`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import SimpleNamespace
from typing import NamedTuple

import torch

from chute import _native, _validate

# torch's dtypes by the engine's names for them (LoaderOptions.dtype).
DTYPES = {torch.uint8: "uint8", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_BY_NAME = {name: dtype for dtype, name in DTYPES.items()}
_VALIDATE = {False: "window", True: "full"}  # DecodeOptions.validate_full -> validate=

_LOADER, _DECODE, _DELIVERY = _native.LoaderOptions(), _native.DecodeOptions(), _native.DeliveryOptions()


def _zero_means(value: int, meaning):
    """The structs store 'auto' (num_threads, prefetch) and None (max_threads) as 0 (bind_options.cc)."""
    return meaning if value == 0 else value


# Every engine keyword a door takes, with its default: the structs', shown as the door takes it.
DEFAULTS = SimpleNamespace(
    batch_size=_LOADER.batch_size,
    shuffle=_LOADER.shuffle,
    seed=_LOADER.seed,
    drop_last=_LOADER.drop_last,
    dtype=_BY_NAME[_LOADER.dtype],
    memory_format=torch.channels_last if _LOADER.channels_last else torch.contiguous_format,
    num_threads=_zero_means(_LOADER.num_threads, "auto"),
    prefetch=_zero_means(_LOADER.prefetch, "auto"),
    max_threads=_zero_means(_LOADER.max_threads, None),
    max_memory=_LOADER.max_memory,
    max_ring_bytes=_LOADER.max_ring_bytes,
    on_error=_LOADER.on_error,
    order=_LOADER.order,
    shard_window=_LOADER.shard_window,
    even_split=_LOADER.even_split,
    rank=None,  # None: torch.distributed's, else torchrun's RANK/WORLD_SIZE, else a single process
    world_size=None,
    max_pixels=_DECODE.max_pixels,
    max_file_bytes=_DECODE.max_file_bytes,
    apply_exif_orientation=_DECODE.apply_exif_orientation,
    decode=_DECODE.decode,
    reducing_gap=_DECODE.reducing_gap,
    validate=_VALIDATE[_DECODE.validate_full],
    accept_truncated=_DECODE.accept_truncated,
    device_prefetch=_DELIVERY.device_prefetch,
    max_device_memory=_DELIVERY.max_device_memory,
)
KEYWORDS = tuple(vars(DEFAULTS))


class Spec(NamedTuple):
    """What :func:`build` returns: the engine's options and the dtype the consumer receives (a door that
    delivers to a device sets ``loader.dtype`` to ``'uint8'`` and converts there)."""

    loader: _native.LoaderOptions  # .decode: its DecodeOptions
    delivery: _native.DeliveryOptions
    dtype: torch.dtype


def build(**keywords) -> Spec:
    """The engine's options from a door's keyword arguments (:data:`KEYWORDS`; one left out keeps its
    default). A wrong type is a TypeError, a value out of range or in conflict a ValueError, each naming the
    argument: the structs' own checks (``OptionRange``, ``validate()``), and here those of what only Python
    has (torch dtypes, memory formats, the distributed environment)."""
    unknown = sorted(set(keywords) - set(KEYWORDS))
    if unknown:
        raise TypeError(f"unexpected engine option {unknown[0]!r} (the engine takes {', '.join(KEYWORDS)})")
    k = {**vars(DEFAULTS), **keywords}
    if k["dtype"] not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {k['dtype']}")
    if k["memory_format"] not in (torch.contiguous_format, torch.channels_last):
        raise ValueError("memory_format must be torch.contiguous_format or torch.channels_last")
    if k["validate"] not in _VALIDATE.values():
        raise ValueError(
            f"validate must be 'window' (check what each crop decodes) or 'full' (decode every "
            f"pixel of every image), got {k['validate']!r}"
        )
    decode = _native.DecodeOptions(
        max_pixels=k["max_pixels"],
        max_file_bytes=k["max_file_bytes"],
        apply_exif_orientation=k["apply_exif_orientation"],
        decode=k["decode"],
        reducing_gap=k["reducing_gap"],
        validate_full=k["validate"] == "full",
        accept_truncated=k["accept_truncated"],
    )
    options = _native.LoaderOptions(
        batch_size=k["batch_size"],
        shuffle=k["shuffle"],
        seed=k["seed"],
        drop_last=k["drop_last"],
        dtype=DTYPES[k["dtype"]],
        channels_last=k["memory_format"] == torch.channels_last,
        num_threads=k["num_threads"],
        max_threads=k["max_threads"],
        prefetch=k["prefetch"],
        max_memory=k["max_memory"],
        max_ring_bytes=k["max_ring_bytes"],
        on_error=k["on_error"],
        order=k["order"],
        shard_window=k["shard_window"],
        even_split=k["even_split"],
        decode=decode,
    )
    delivery = _native.DeliveryOptions(device_prefetch=k["device_prefetch"], max_device_memory=k["max_device_memory"])
    options.validate()  # num_threads against max_threads, ... (Loader::create checks again, with the source)
    options.rank, options.world_size = resolve_distributed(k["rank"], k["world_size"])
    return Spec(options, delivery, k["dtype"])


def build_from(arguments: dict) -> Spec:
    """:func:`build` from a door's arguments (its ``locals()`` on entry): every engine keyword, by name, so
    that a door cannot leave one out or hand over another value than its caller's."""
    return build(**{k: arguments[k] for k in KEYWORDS})


def resolve_distributed(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """rank and world_size: as given, else from an initialised torch.distributed, else from torchrun's
    environment (RANK, WORLD_SIZE), else a single process."""
    where = ""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ValueError("give both rank and world_size, or neither")
        world_size = _validate.integer("world_size", world_size, 1, _validate.INT64_MAX)
        rank = _validate.integer("rank", rank, 0, _validate.INT64_MAX)
    else:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
            where = " (from torch.distributed)"
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            world_size = _validate.env_int("WORLD_SIZE", 1, _validate.INT64_MAX)
            rank = _validate.env_int("RANK", 0, _validate.INT64_MAX)
            where = " (from the environment variables RANK and WORLD_SIZE)"
        else:
            rank, world_size = 0, 1
    if world_size <= 0:
        raise ValueError(f"world_size must be positive, got {world_size}{where}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank} with world_size={world_size}{where}")
    return rank, world_size


def native_transforms(transforms) -> list:
    """chute transforms (a list, or a Compose-like object with ``.transforms``) as the engine's."""
    items = getattr(transforms, "transforms", transforms)
    if not isinstance(items, Sequence):
        raise TypeError(f"transforms must be a list of chute transforms, got {type(transforms).__name__}")
    out = []
    for t in items:
        if not hasattr(t, "_to_native"):
            raise TypeError(f"{t!r} is not a chute transform (chute.RandomResizedCrop, chute.Resize, ...)")
        out.append(t._to_native())
    return out


def warn_notices(native_loader, stacklevel: int, prefix: str = "") -> None:
    """The engine's notices about the options it adjusted (``Loader::notices()``: an explicit prefetch
    lowered to fit ``max_memory``), each as one warning; the words are the engine's."""
    import warnings

    for notice in native_loader.notices:
        warnings.warn(prefix + notice, stacklevel=stacklevel + 1)
