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
from chute.dataloader.translate_augment import PIXEL_STAGE, pixel_stage, random_erasing
from chute.transforms import CenterCrop, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize

V1 = "torchvision.transforms.transforms"
_V1_AUTOAUGMENT = "torchvision.transforms.autoaugment"  # v1's AutoAugment, RandAugment, TrivialAugmentWide, AugMix
_V2 = "torchvision.transforms.v2"  # v2 classes live in its submodules (_geometry, _misc, ...)


def _family(t, v1_modules: tuple[str, ...]) -> str | None:
    """ "v1" or "v2" for a torchvision transform, by module (torchvision is never imported here)."""
    module = type(t).__module__
    if module in v1_modules or module == _V1_AUTOAUGMENT:
        return "v1"
    if module == _V2 or module.startswith(_V2 + "."):
        return "v2"
    return None


def _delegating_call(self, img):
    return self.transforms(img)


def unwrap_preset(transform):
    """The Compose inside a preset object whose ``__call__`` is exactly ``return self.transforms(img)``
    (torchvision's reference ClassificationPresetTrain/Eval, which train.py hands to ImageFolder), read from
    its code object without calling it; anything else unchanged."""
    call = vars(type(transform)).get("__call__")  # defined by the class itself
    code = getattr(call, "__code__", None)
    ref = _delegating_call.__code__
    if (
        code is None
        or code.co_code != ref.co_code
        or code.co_names != ref.co_names
        or code.co_argcount != 2
        or call.__defaults__
        or call.__closure__
        or type(transform).__getattribute__ is not object.__getattribute__
        or hasattr(type(transform), "transforms")  # self.transforms is the instance's own attribute
    ):
        return transform
    return getattr(transform, "__dict__", {}).get("transforms", transform)


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
    transform = unwrap_preset(transform)
    if type(transform).__name__ != "Compose" or _family(transform, v1_modules) is None:
        return Fallback(f"transform {type(transform).__name__} is not a torchvision Compose (v1 or v2)")
    timm = _timm_transform(_flatten(transform, v1_modules))
    if timm is not None:
        return timm
    stage = "pil" if source == "pil" else "uint8"
    out: list = []  # the resize and crop, then the pixel stage (with a flip that precedes an augmentation)
    tail: list = []  # Normalize and RandomErasing on the float32 tensor, in list order
    flip = normalize = augmented = erased = None
    flip_placed = False
    for t in _flatten(transform, v1_modules):
        name, family = type(t).__name__, _family(t, v1_modules)
        if (name, type(t).__module__) == _TIMM_TO_TENSOR and stage == "pil":
            name, family = "ToTensor", "v1"  # on a PIL image, ToTensor
        if family is None:
            return Fallback(f"transform {name} ({type(t).__module__}) is not a torchvision v1 or v2 transform")
        try:
            if name == "RandomHorizontalFlip":
                if flip is not None:
                    return Fallback("two RandomHorizontalFlip transforms: chute flips once")
                if erased is not None:
                    return Fallback("RandomHorizontalFlip after RandomErasing: chute erases the written sample")
                flip = RandomHorizontalFlip(t.p)
            elif name in ("RandomResizedCrop", "Resize", "CenterCrop") and (
                stage == "pil" or (stage == "uint8" and family == "v2")
            ):
                if flip is not None:
                    return Fallback(f"RandomHorizontalFlip before {name}: chute flips after cropping and resizing")
                if augmented is not None:
                    return Fallback(f"{augmented} before {name}: chute augments the resized and cropped image")
                if stage == "uint8" and name != "CenterCrop" and getattr(t, "antialias", True) is not True:
                    return Fallback(
                        f"{name}(antialias={t.antialias}) on a uint8 tensor: torchvision resizes "
                        "it without antialiasing, chute only with"
                    )
                out.append(_geometric(t, name))  # PIL images: bilinear is always antialiased
            elif name in PIXEL_STAGE and stage in ("pil", "uint8"):
                if flip is not None and not flip_placed:
                    out.append(flip)  # a geometric op after a flip differs from one before it
                    flip_placed = True
                out.append(pixel_stage(t, name, family, stage))
                augmented = augmented or name
            elif name == "RandomErasing" and stage == "float32":
                erased = random_erasing(t, family)
                tail.append(erased)
            elif (name == "Identity" or name == "ToPureTensor") and family == "v2":
                pass  # ToPureTensor unwraps tv_tensors.Image: collated, a plain tensor either way
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
                tail.append(normalize)
            elif name == "Normalize":
                return Fallback(
                    f"Normalize on a {stage} {'PIL image' if stage == 'pil' else 'tensor'}: torchvision raises on it"
                )
            elif name in PIXEL_STAGE or name == "RandomErasing":
                where = "PIL images" if stage == "pil" else f"{stage} tensors"
                return Fallback(
                    f"transform {name} on {where}: chute augments the image before ToTensor/ToDtype and erases "
                    "the float32 tensor in [0, 1] or normalised (after ToTensor or ToDtype(torch.float32, scale=True))"
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
        tail.append(Normalize((0.0, 0.0, 0.0), (1 / 255.0,) * 3))  # x / 255 / (1 / 255): back to 0..255
    transforms = out + ([flip] if flip is not None and not flip_placed else []) + tail
    return transforms, torch.uint8 if stage == "uint8" else torch.float32


_TIMM_TO_TENSOR = ("MaybeToTensor", "timm.data.transforms")  # timm's ToTensor, in its eval and train pipelines

# timm's own transforms (timm.data.create_transform's output is a torchvision Compose of them), by what
# stands in the way most: its policies first, then its RandomErasing, then the rest.
_TIMM_REASONS = {
    "RandAugment": "timm's own RandAugment (its op set with SolarizeAdd and relative translations, a 0.5 "
    "probability per op, Gaussian magnitude noise 'mstd', increasing magnitudes 'inc') has no native "
    "equivalent in chute",
    "AutoAugment": "timm's own AutoAugment (its op set and PIL arithmetic) has no native equivalent in chute",
    "AugMixAugment": "timm's own AugMix (its op set, blended in PIL) has no native equivalent in chute",
    "RandomErasing": "timm's RandomErasing (modes const/rand/pixel, a count of boxes per image, applied "
    "after Normalize on the tensor) has no native equivalent in chute",
}


def _timm_transform(transforms: list) -> Fallback | None:
    """The Fallback for a Compose with timm's transforms, naming timm's op that stands in the way."""
    timm = [
        t
        for t in transforms
        if type(t).__module__.split(".")[0] == "timm" and (type(t).__name__, type(t).__module__) != _TIMM_TO_TENSOR
    ]
    if not timm:
        return None
    for name, reason in _TIMM_REASONS.items():
        for t in timm:
            if type(t).__name__ == name:
                return Fallback(f"transform {name} ({type(t).__module__}): {reason}")
    t = timm[0]
    return Fallback(
        f"transform {type(t).__name__} ({type(t).__module__}) is timm's, not torchvision's: chute does not translate it"
    )


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
