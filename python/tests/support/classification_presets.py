"""torchvision's reference classification presets (references/classification/presets.py, torchvision 0.16 to
0.29: ``ClassificationPresetTrain`` and ``ClassificationPresetEval`` with ``backend`` and ``use_v2``),
transcribed: the transforms are built exactly as there, from the modules ``make_presets`` is given (real
torchvision's v1 and v2, or the stand-ins below where torchvision does not import).

The stand-ins (``standin_modules()``) are torchvision's v1 and v2 transform classes as far as chute's
translator reads them: torchvision's class names and modules, its constructors' stored attributes. They do
not transform images; the main tier uses them to test which chute pipeline a preset becomes, the
real-torchvision tier runs the presets themselves."""

from __future__ import annotations

import enum
import types

import torch

from chute.bench.pil_reference import as_torchvision


def make_presets(get_module, InterpolationMode):  # noqa: N803 (torchvision's name)
    """(ClassificationPresetTrain, ClassificationPresetEval) over `get_module(use_v2)` (torchvision.transforms
    or torchvision.transforms.v2) and torchvision's InterpolationMode."""

    class ClassificationPresetTrain:
        # Note: this transform assumes that the input to forward() are always PIL
        # images, regardless of the backend parameter.
        def __init__(
            self,
            *,
            crop_size,
            mean=(0.485, 0.456, 0.406),
            std=(0.229, 0.224, 0.225),
            interpolation=InterpolationMode.BILINEAR,
            hflip_prob=0.5,
            auto_augment_policy=None,
            ra_magnitude=9,
            augmix_severity=3,
            random_erase_prob=0.0,
            backend="pil",
            use_v2=False,
        ):
            T = get_module(use_v2)  # noqa: N806

            transforms = []
            backend = backend.lower()
            if backend == "tensor":
                transforms.append(T.PILToTensor())
            elif backend != "pil":
                raise ValueError(f"backend can be 'tensor' or 'pil', but got {backend}")

            transforms.append(T.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True))
            if hflip_prob > 0:
                transforms.append(T.RandomHorizontalFlip(hflip_prob))
            if auto_augment_policy is not None:
                if auto_augment_policy == "ra":
                    transforms.append(T.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
                elif auto_augment_policy == "ta_wide":
                    transforms.append(T.TrivialAugmentWide(interpolation=interpolation))
                elif auto_augment_policy == "augmix":
                    transforms.append(T.AugMix(interpolation=interpolation, severity=augmix_severity))
                else:
                    aa_policy = T.AutoAugmentPolicy(auto_augment_policy)
                    transforms.append(T.AutoAugment(policy=aa_policy, interpolation=interpolation))

            if backend == "pil":
                transforms.append(T.PILToTensor())

            transforms.extend(
                [
                    T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float),
                    T.Normalize(mean=mean, std=std),
                ]
            )
            if random_erase_prob > 0:
                transforms.append(T.RandomErasing(p=random_erase_prob))

            if use_v2:
                transforms.append(T.ToPureTensor())

            self.transforms = T.Compose(transforms)

        def __call__(self, img):
            return self.transforms(img)

    class ClassificationPresetEval:
        def __init__(
            self,
            *,
            crop_size,
            resize_size=256,
            mean=(0.485, 0.456, 0.406),
            std=(0.229, 0.224, 0.225),
            interpolation=InterpolationMode.BILINEAR,
            backend="pil",
            use_v2=False,
        ):
            T = get_module(use_v2)  # noqa: N806
            transforms = []
            backend = backend.lower()
            if backend == "tensor":
                transforms.append(T.PILToTensor())
            elif backend != "pil":
                raise ValueError(f"backend can be 'tensor' or 'pil', but got {backend}")

            transforms += [
                T.Resize(resize_size, interpolation=interpolation, antialias=True),
                T.CenterCrop(crop_size),
            ]

            if backend == "pil":
                transforms.append(T.PILToTensor())

            transforms += [
                T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float),
                T.Normalize(mean=mean, std=std),
            ]

            if use_v2:
                transforms.append(T.ToPureTensor())

            self.transforms = T.Compose(transforms)

        def __call__(self, img):
            return self.transforms(img)

    return ClassificationPresetTrain, ClassificationPresetEval


class AutoAugmentPolicy(enum.Enum):
    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


def _standin(name: str, module: str, params: str):
    """A class named `name` in `module` whose constructor stores `params` ("a, b=default, ...") as
    attributes, as torchvision's constructors do for the ones the translator reads."""
    source = (
        f"def __init__(self, {params}):\n    vars(self).update({{k: v for k, v in locals().items() if k != 'self'}})\n"
    )
    namespace = {"torch": torch, "AutoAugmentPolicy": AutoAugmentPolicy, "BILINEAR": "bilinear"}
    exec(source, namespace)  # noqa: S102 (a constructor from a fixed parameter list)
    return type(name, (), {"__module__": module, "__qualname__": name, "__init__": namespace["__init__"]})


_AUTO = (
    ("AutoAugment", "policy=AutoAugmentPolicy.IMAGENET, interpolation='nearest', fill=None"),
    ("RandAugment", "num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation='nearest', fill=None"),
    ("TrivialAugmentWide", "num_magnitude_bins=31, interpolation='nearest', fill=None"),
    (
        "AugMix",
        "severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True, interpolation='bilinear', fill=None",
    ),
)


class _V2RandomErasing:
    __module__, __qualname__ = "torchvision.transforms.v2._augment", "RandomErasing"

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0.0, inplace=False):
        self.p, self.scale, self.ratio, self.inplace = p, scale, ratio, inplace
        # v2 keeps a list of floats, None for 'random'
        self.value = [float(value)] if isinstance(value, (int, float)) else None if isinstance(value, str) else value


_V2RandomErasing.__name__ = "RandomErasing"


def standin_modules() -> tuple[types.SimpleNamespace, types.SimpleNamespace]:
    """(v1, v2): what the presets use of torchvision.transforms and torchvision.transforms.v2."""
    v1 = as_torchvision()
    autoaugment = "torchvision.transforms.autoaugment"
    v1 = types.SimpleNamespace(
        **vars(v1),
        **{name: _standin(name, autoaugment, params) for name, params in _AUTO},
        AutoAugmentPolicy=AutoAugmentPolicy,
        RandomErasing=_standin(
            "RandomErasing",
            "torchvision.transforms.transforms",
            "p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False",
        ),
    )
    geometry, misc = "torchvision.transforms.v2._geometry", "torchvision.transforms.v2._misc"
    v2 = types.SimpleNamespace(
        Compose=_standin("Compose", "torchvision.transforms.v2._container", "transforms"),
        PILToTensor=_standin("PILToTensor", "torchvision.transforms.v2._type_conversion", ""),
        ToPureTensor=_standin("ToPureTensor", "torchvision.transforms.v2._type_conversion", ""),
        RandomResizedCrop=_standin(
            "RandomResizedCrop",
            geometry,
            "size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation=BILINEAR, antialias=True",
        ),
        Resize=_standin("Resize", geometry, "size, interpolation=BILINEAR, max_size=None, antialias=True"),
        CenterCrop=_standin("CenterCrop", geometry, "size"),
        RandomHorizontalFlip=_standin("RandomHorizontalFlip", geometry, "p=0.5"),
        ToDtype=_standin("ToDtype", misc, "dtype, scale=False"),
        Normalize=_standin("Normalize", misc, "mean, std, inplace=False"),
        RandomErasing=_V2RandomErasing,
        AutoAugmentPolicy=AutoAugmentPolicy,
        **{name: _standin(name, "torchvision.transforms.v2._auto_augment", params) for name, params in _AUTO},
    )
    return v1, v2
