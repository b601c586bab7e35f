"""torchvision transforms -> chute transforms: the one translator, used by the DataLoader's ``"imagefolder"``
fast path (folder_path.py) and by ``chute.doctor`` (doctor/compare.py, which builds the chute loader it
compares with).

``translate(Compose, source)`` gives chute's equivalent pipeline and the output dtype, or a
:class:`~chute.dataloader.base.Fallback` naming the transform in the way. A transform is recognised by its
class name and module (``torchvision.transforms.transforms`` for v1, ``torchvision.transforms.v2.*``), so
torchvision is never imported here. What qualifies is listed in folder_path.py's docstring.
"""

from __future__ import annotations

import torch

from chute.dataloader.base import Fallback
from chute.transforms import CenterCrop, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize

V1 = "torchvision.transforms.transforms"
_V2 = "torchvision.transforms.v2"  # v2 classes live in its submodules (_geometry, _misc, ...)


def _family(t, v1_modules: tuple[str, ...]) -> str | None:
    """ "v1" or "v2" for a torchvision transform, by module (torchvision is never imported here)."""
    module = type(t).__module__
    if module in v1_modules:
        return "v1"
    if module == _V2 or module.startswith(_V2 + "."):
        return "v2"
    return None


def _flatten(transform, v1_modules: tuple[str, ...]) -> list:
    """The transforms of a (v1 or v2) Compose, nested Composes (v2.Compose([v2.ToImage(), v2.ToDtype(...)]),
    the ToTensor replacement torchvision suggests) flattened in order."""
    out = []
    for t in transform.transforms:
        if type(t).__name__ == "Compose" and _family(t, v1_modules) is not None:
            out.extend(_flatten(t, v1_modules))
        else:
            out.append(t)
    return out


# Stages of a sample through the Compose: "pil" (a PIL image), "uint8" (a CHW uint8 tensor, plain or
# tv_tensors.Image), "float32" (values in [0, 1]) and "float255" (float32 holding 0..255: v2's
# ToDtype(torch.float32, scale=False)).
def translate(transform, source: str = "pil", *, v1_modules: tuple[str, ...] = (V1,)):
    """(chute transforms, output dtype) for a torchvision Compose (v1 or v2) of samples from `source`:
    "pil" (PIL images: default_loader) or "tensor" (uint8 CHW tensors: torchvision.io.decode_image);
    or a Fallback naming the culprit. ``v1_modules``: the modules whose classes are torchvision's v1
    transforms (the doctor adds the bench's PIL stand-ins: same names, attributes and semantics).

    Geometry on PIL images is PIL's arithmetic, which chute reproduces exactly. v2 geometry on uint8
    tensors (after ToImage/PILToTensor, or from decode_image) is torch's antialiased uint8 resize, which
    rounds differently: chute stays within its stated tolerance (measured: max 1 level on ~0.2% of values,
    test_torchvision_real.py)."""
    if transform is None:
        return Fallback(
            "transform is None: samples are PIL images, which default_collate cannot batch"
            if source == "pil"
            else "transform is None: images of different sizes cannot be batched"
        )
    if type(transform).__name__ != "Compose" or _family(transform, v1_modules) is None:
        return Fallback(f"transform {type(transform).__name__} is not a torchvision Compose (v1 or v2)")
    stage = "pil" if source == "pil" else "uint8"
    out: list = []
    flip = normalize = None
    for t in _flatten(transform, v1_modules):
        name, family = type(t).__name__, _family(t, v1_modules)
        if family is None:
            return Fallback(f"transform {name} ({type(t).__module__}) is not a torchvision v1 or v2 transform")
        try:
            if name == "RandomHorizontalFlip":
                if flip is not None:
                    return Fallback("two RandomHorizontalFlip transforms: chute flips once")
                flip = RandomHorizontalFlip(t.p)
            elif name in ("RandomResizedCrop", "Resize", "CenterCrop") and (
                stage == "pil" or (stage == "uint8" and family == "v2")
            ):
                if flip is not None:
                    return Fallback(f"RandomHorizontalFlip before {name}: chute flips after cropping and resizing")
                if stage == "uint8" and name != "CenterCrop" and getattr(t, "antialias", True) is not True:
                    return Fallback(
                        f"{name}(antialias={t.antialias}) on a uint8 tensor: torchvision resizes "
                        "it without antialiasing, chute only with"
                    )
                out.append(_geometric(t, name))  # PIL images: bilinear is always antialiased
            elif name == "Identity" and family == "v2":
                pass
            elif name in ("ToTensor", "PILToTensor", "ToImage") and stage != "pil":
                if family == "v1":
                    return Fallback(f"{name} on a {stage} tensor: torchvision raises on it")
                # v2 passes tensors through these (ToImage wraps a plain tensor as an Image)
            elif name == "ToTensor":
                if torch.get_default_dtype() != torch.float32:
                    return Fallback(
                        f"ToTensor makes {torch.get_default_dtype()} (torch's default dtype): chute makes float32"
                    )
                stage = "float32"
            elif name in ("PILToTensor", "ToImage"):
                stage = "uint8"
            elif name == "ToDtype" or (name == "ConvertImageDtype" and stage != "pil"):
                scale = True if name == "ConvertImageDtype" else bool(t.scale)
                if not isinstance(t.dtype, torch.dtype):
                    return Fallback(f"{name} with a dict of dtypes: chute converts images to one dtype")
                if stage == "pil":
                    continue  # v2's ToDtype passes PIL images through
                if t.dtype == torch.float32:
                    if stage == "uint8":
                        stage = "float32" if scale else "float255"
                elif t.dtype != torch.uint8 or stage != "uint8":
                    return Fallback(f"{name}({t.dtype}) from {stage}: chute converts uint8 to float32 only")
            elif stage in ("float32", "float255") and name == "Normalize":
                if normalize is not None:
                    return Fallback("two Normalize transforms: chute normalises once")
                unit = 255.0 if stage == "float255" else 1.0  # chute normalises x / 255
                normalize = Normalize([m / unit for m in _floats(t.mean)], [s / unit for s in _floats(t.std)])
            elif name == "Normalize":
                return Fallback(
                    f"Normalize on a {stage} {'PIL image' if stage == 'pil' else 'tensor'}: torchvision raises on it"
                )
            else:
                where = "on PIL images" if stage == "pil" else f"on {stage} tensors"
                if stage == "uint8" and family == "v1" and name in ("RandomResizedCrop", "Resize", "CenterCrop"):
                    where += " (v1 resizes tensors in float; its v2 twin or the PIL image is what chute matches)"
                return Fallback(f"transform {name} {where} has no native equivalent")
        except (TypeError, ValueError) as e:  # chute's transforms reject what they cannot reproduce exactly
            return Fallback(f"transform {name}: {e}")
    if stage == "pil":
        return Fallback(
            "the Compose has no ToTensor/PILToTensor/ToImage: samples stay PIL images, which "
            "default_collate cannot batch"
        )
    if stage == "float255" and normalize is None:
        normalize = Normalize((0.0, 0.0, 0.0), (1 / 255.0,) * 3)  # x / 255 / (1 / 255): back to 0..255
    transforms = out + ([flip] if flip is not None else []) + ([normalize] if normalize is not None else [])
    return transforms, torch.uint8 if stage == "uint8" else torch.float32


def _floats(v) -> list[float]:
    return [float(x) for x in (v.tolist() if isinstance(v, torch.Tensor) else v)]


def _geometric(t, name: str):
    """chute's twin of a torchvision geometric transform, antialiased bilinear (the caller checked that
    torchvision antialiases too: always on PIL images; on tensors when antialias=True)."""
    interpolation = getattr(t, "interpolation", "bilinear")
    if name == "RandomResizedCrop":
        return RandomResizedCrop(_size(t.size), tuple(t.scale), tuple(t.ratio), interpolation, True)
    if name == "Resize":
        if getattr(t, "max_size", None) is not None:
            raise ValueError("max_size is not supported")
        if t.size is None:
            raise ValueError("size=None is not supported")
        return Resize(t.size if isinstance(t.size, int) else list(t.size), interpolation, antialias=True)
    return CenterCrop(_size(t.size))


def _size(size):
    """torchvision keeps a pair (its stand-ins may keep an int): chute's transforms take either."""
    return size if isinstance(size, int) else tuple(size)
