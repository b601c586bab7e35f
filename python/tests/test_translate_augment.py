"""The translator on the recipes people train with: torchvision's reference presets (references/classification/
presets.py, every auto_augment_policy, random_erase_prob, backend pil/tensor, use_v2 both ways) become chute's
native pipeline with torchvision's parameters, backend from where each transform stands and api from its
module; the parameters chute cannot honour fall back naming the transform and the reason.

Where torchvision imports (.venv-tv) the presets are built from it, elsewhere from the stand-ins in
support/classification_presets.py (torchvision's names, modules and stored attributes). The pixels of these
pipelines are tested by test_augment_loader.py (chute.Loader against torchvision's ops given chute's draws)
and test_presets_real.py (chute.DataLoader against torchvision, real-torchvision tier)."""

from __future__ import annotations

import logging

import pytest
import torch
from support.classification_presets import make_presets, standin_modules
from torch.utils.data import DataLoader

import chute
from chute.bench.pil_reference import as_torchvision, real_torchvision
from chute.dataloader import plan as seam
from chute.dataloader.base import Fallback
from chute.dataloader.translate import translate


def _modules():
    if real_torchvision() is not None:
        import torchvision.transforms
        import torchvision.transforms.v2

        return torchvision.transforms, torchvision.transforms.v2, torchvision.transforms.InterpolationMode
    v1, v2 = standin_modules()
    return v1, v2, v1.InterpolationMode


V1, V2, InterpolationMode = _modules()
Train, Eval = make_presets(lambda use_v2: V2 if use_v2 else V1, InterpolationMode)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
POLICIES = [None, "ra", "ta_wide", "augmix", "imagenet", "cifar10", "svhn"]


def described(transforms) -> list[tuple[str, dict]]:
    return [(type(t).__name__, dict(vars(t))) for t in transforms]


def expected_train(policy, random_erase_prob, backend, api) -> list:
    aug_backend = {"backend": "pil" if backend == "pil" else "tensor", "api": api}
    out = [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(0.5)]
    if policy == "ra":
        out.append(chute.RandAugment(magnitude=9, interpolation="bilinear", **aug_backend))
    elif policy == "ta_wide":
        out.append(chute.TrivialAugmentWide(interpolation="bilinear", **aug_backend))
    elif policy == "augmix":
        out.append(chute.AugMix(severity=3, interpolation="bilinear", api=api))
    elif policy is not None:
        out.append(chute.AutoAugment(policy, interpolation="bilinear", **aug_backend))
    out.append(chute.Normalize(MEAN, STD))
    if random_erase_prob > 0:
        out.append(chute.RandomErasing(p=random_erase_prob))
    return out


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("backend", ["pil", "tensor"])
@pytest.mark.parametrize("random_erase_prob", [0.0, 0.1])
@pytest.mark.parametrize("policy", POLICIES)
def test_reference_train_presets_are_chutes_pipeline(policy, random_erase_prob, backend, use_v2):
    preset = Train(
        crop_size=224, auto_augment_policy=policy, random_erase_prob=random_erase_prob, backend=backend, use_v2=use_v2
    )
    got = translate(preset, "pil")
    if backend == "tensor" and not use_v2:
        # v1 resizes a uint8 tensor in float: not what chute reproduces (its v2 twin, or the PIL image, is)
        assert isinstance(got, Fallback) and "RandomResizedCrop on uint8 tensors" in str(got)
        return
    assert not isinstance(got, Fallback), str(got)
    transforms, dtype = got
    assert dtype == torch.float32
    assert described(transforms) == described(
        expected_train(policy, random_erase_prob, backend, "v2" if use_v2 else "v1")
    )


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
def test_reference_eval_presets_are_chutes_pipeline(use_v2):
    got = translate(Eval(crop_size=224, use_v2=use_v2), "pil")
    assert not isinstance(got, Fallback), str(got)
    transforms, dtype = got
    assert dtype == torch.float32
    assert described(transforms) == described([chute.Resize(256), chute.CenterCrop(224), chute.Normalize(MEAN, STD)])


def test_the_preset_object_takes_the_fast_path_in_chute_dataloader(folder, caplog):
    ds = (real_torchvision() or as_torchvision()).ImageFolder(
        folder, transform=Train(crop_size=32, auto_augment_policy="ta_wide", random_erase_prob=0.1)
    )
    with caplog.at_level(logging.WARNING, logger="chute"):
        plan = seam.choose(DataLoader(ds, batch_size=4))
    assert isinstance(plan, seam.Plan), str(plan)
    plan.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


class NotAPreset:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        return self.transforms(img).flip(-1)


def _v1(*transforms):
    return V1.Compose([V1.Resize(64), V1.CenterCrop(56), *transforms])


@pytest.mark.parametrize(
    "transform, expected",
    [
        (
            _v1(V1.TrivialAugmentWide(interpolation=InterpolationMode.BICUBIC), V1.ToTensor()),
            "transform TrivialAugmentWide: TrivialAugmentWide: chute implements interpolation NEAREST and BILINEAR",
        ),
        (
            V1.Compose([V1.TrivialAugmentWide(), V1.Resize(64), V1.CenterCrop(56), V1.ToTensor()]),
            "TrivialAugmentWide before Resize: chute augments the resized and cropped image",
        ),
        (_v1(V1.PILToTensor(), V1.RandomErasing()), "transform RandomErasing on uint8 tensors"),
        (_v1(V1.ToTensor(), V1.TrivialAugmentWide()), "transform TrivialAugmentWide on float32 tensors"),
        (
            V2.Compose([V2.Resize(64), V2.CenterCrop(56), V2.TrivialAugmentWide(fill={"Image": 3}), V2.PILToTensor()]),
            "transform TrivialAugmentWide: fill={'Image': 3} is a dict of fills per input type",
        ),
        (
            V2.Compose([V2.Resize(64), V2.CenterCrop(56), V2.PILToTensor(), V2.AutoAugment(fill=[1, 2])]),
            "transform AutoAugment: AutoAugment: the number of elements in 'fill' does not match",
        ),
        (
            _v1(V1.ToTensor(), V1.Normalize(MEAN, STD), V1.RandomErasing(), V1.RandomHorizontalFlip()),
            "RandomHorizontalFlip after RandomErasing",
        ),
        (NotAPreset(_v1(V1.ToTensor())), "transform NotAPreset is not a torchvision Compose"),
    ],
    ids=["bicubic", "before-resize", "erase-uint8", "augment-float", "fill-dict", "fill-2", "flip-after-erase", "wrap"],
)
def test_what_chute_cannot_honour_falls_back_naming_the_transform_and_the_reason(transform, expected):
    got = translate(transform, "pil")
    assert isinstance(got, Fallback)
    assert expected in str(got)


def test_random_erasing_values_and_the_flip_before_an_augmentation():
    got = translate(
        _v1(
            V1.RandomHorizontalFlip(0.3),
            V1.RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=11, fill=[4, 5, 6]),
            V1.ToTensor(),
            V1.RandomErasing(p=0.2, value="random"),
            V1.Normalize(MEAN, STD),
            V1.RandomErasing(p=0.3, value=(0.1, 0.2, 0.3)),
        ),
        "pil",
    )
    assert not isinstance(got, Fallback), str(got)
    assert described(got[0]) == described(
        [
            chute.Resize(64),
            chute.CenterCrop(56),
            chute.RandomHorizontalFlip(0.3),  # before the augmentation: where the list puts it
            chute.RandAugment(3, 5, 11, fill=(4, 5, 6)),
            chute.RandomErasing(p=0.2, value="random"),  # before Normalize: in [0, 1], then normalised
            chute.Normalize(MEAN, STD),
            chute.RandomErasing(p=0.3, value=(0.1, 0.2, 0.3)),
        ]
    )


def _timm(name: str, module: str):
    return type(name, (), {"__module__": module, "__init__": lambda self, *a, **k: None})


def test_timm_create_transform_eval_is_recognised_and_train_falls_back_naming_timms_op():
    """timm.data.create_transform's output shapes (timm 1.0): a torchvision Compose of timm's and torchvision's
    transforms. Eval (Resize, CenterCrop, timm's MaybeToTensor, Normalize) is chute's pipeline; train with
    auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.25 falls back naming timm's RandAugment, which chute does
    not implement (its op set, per-op probability and magnitude noise differ from torchvision's)."""
    maybe_to_tensor = _timm("MaybeToTensor", "timm.data.transforms")
    evaluate = V1.Compose([V1.Resize(256), V1.CenterCrop(224), maybe_to_tensor(), V1.Normalize(MEAN, STD)])
    got = translate(evaluate, "pil")
    assert not isinstance(got, Fallback), str(got)
    assert described(got[0]) == described([chute.Resize(256), chute.CenterCrop(224), chute.Normalize(MEAN, STD)])
    train = V1.Compose(
        [
            _timm("RandomResizedCropAndInterpolation", "timm.data.transforms")(224),
            V1.RandomHorizontalFlip(),
            _timm("RandAugment", "timm.data.auto_augment")(),
            maybe_to_tensor(),
            V1.Normalize(MEAN, STD),
            _timm("RandomErasing", "timm.data.random_erasing")(),
        ]
    )
    reason = str(translate(train, "pil"))
    assert reason.startswith("transform RandAugment (timm.data.auto_augment): timm's own RandAugment")
    erasing_only = V1.Compose([V1.Resize(256), maybe_to_tensor(), _timm("RandomErasing", "timm.data.random_erasing")()])
    assert "transform RandomErasing (timm.data.random_erasing): timm's RandomErasing" in str(translate(erasing_only))
