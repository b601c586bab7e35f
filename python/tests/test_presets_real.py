"""torchvision's reference presets (references/classification/presets.py, transcribed in
support/classification_presets.py) through chute.DataLoader against real torchvision: every train preset
(each auto_augment_policy, random_erase_prob, backend pil/tensor, use_v2 both ways) and the eval preset take
the fast path and give torch's DataLoader's structure (dtype, shape, labels, order); the eval preset's pixels
are torchvision's within the stated tolerance; under the same draws (chute's, replayed through the
transcriptions that test_torchvision_augment_real.py checks bit for bit against torchvision's ops) the train
presets' samples are torchvision's pipeline, bit for bit.

Skipped where torchvision does not import (the main venv); scripts/test_torchvision.sh runs it."""

from __future__ import annotations

import pytest
import torch
from support.classification_presets import make_presets
from torch.utils.data import DataLoader

import chute
from chute import _native
from chute.bench import pil_reference as R
from chute.dataloader import plan as seam
from chute.dataloader import translate

try:
    import torchvision.transforms
    import torchvision.transforms.v2
    from torchvision import datasets
except (ImportError, OSError, RuntimeError) as e:  # torchvision's build must match torch's
    pytest.skip(
        f"torchvision does not import here ({type(e).__name__}); scripts/test_torchvision.sh runs this",
        allow_module_level=True,
    )

from test_augment_loader import replay  # noqa: E402
from test_fastpath_folder import check_structure, fast_and_ref, pixel_error  # noqa: E402

Train, Eval = make_presets(
    lambda use_v2: torchvision.transforms.v2 if use_v2 else torchvision.transforms,
    torchvision.transforms.InterpolationMode,
)
MEAN, STD = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1), torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
CROP = 40
CONFIGS = [
    (policy, erase, backend, use_v2)
    for policy in (None, "ra", "ta_wide", "augmix", "imagenet", "cifar10", "svhn")
    for erase in (0.0, 0.1)
    for backend in ("pil", "tensor")
    for use_v2 in (False, True)
    if backend == "pil" or use_v2  # v1 resizes tensors in float: that one falls back (test_translate_augment.py)
]


@pytest.mark.parametrize("policy, erase, backend, use_v2", CONFIGS)
def test_train_presets_take_the_fast_path_with_torchs_structure(folder, policy, erase, backend, use_v2):
    preset = Train(crop_size=CROP, auto_augment_policy=policy, random_erase_prob=erase, backend=backend, use_v2=use_v2)
    fast, ref = fast_and_ref(datasets.ImageFolder(folder, transform=preset), batch_size=8, shuffle=True)
    check_structure(fast, ref)


@pytest.mark.parametrize("policy", [None, "ra", "ta_wide", "augmix", "imagenet", "cifar10", "svhn"])
def test_v1_train_presets_are_torchvisions_under_the_same_draws(folder, policy):
    """Each sample of the fast path against torchvision's preset pipeline on the PIL image given the sample's
    draws: the crop, the flip, the policy's ops, ConvertImageDtype and Normalize, then RandomErasing."""
    preset = Train(crop_size=CROP, auto_augment_policy=policy, random_erase_prob=0.5)
    dataset = datasets.ImageFolder(folder, transform=preset)
    loader = DataLoader(dataset, batch_size=len(dataset), generator=torch.Generator().manual_seed(5))
    plan = seam.choose(loader)
    assert isinstance(plan, seam.Plan), str(plan)
    seed = torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
    try:
        ((images, _),) = list(plan.batches(iter(loader._index_sampler), base_seed=seed))
    finally:
        plan.close()
    transforms, _ = translate.translate(preset, "pil")
    natives = [t._to_native() for t in transforms]
    erasing = 0
    for index, (path, _) in enumerate(dataset.samples):
        pixels = replay(path, transforms[:-2], index, CROP, seed=seed)  # up to the policy
        want = (torch.from_numpy(pixels.copy()).permute(2, 0, 1).float() / 255 - MEAN) / STD
        draws = _native.sample_draws(natives, *R.pil_loader(path).size, seed, 0, index)
        if draws["erasing"][0] is not None:
            top, left, h, w = draws["erasing"][0]
            want[:, top : top + h, left : left + w] = 0
            erasing += 1
        assert torch.equal(images[index], want), index
    assert 0 < erasing < len(dataset)


@pytest.mark.parametrize("backend", ["pil", "tensor"])
@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
def test_eval_presets_are_torchvisions(folder, use_v2, backend):
    dataset = datasets.ImageFolder(
        folder, transform=Eval(crop_size=CROP, resize_size=48, backend=backend, use_v2=use_v2)
    )
    if backend == "tensor" and not use_v2:
        assert "uint8 tensors" in str(seam.choose(DataLoader(dataset, batch_size=4)))
        return
    fast, ref = fast_and_ref(dataset, batch_size=8)
    check_structure(fast, ref)
    mae, mx = pixel_error(fast, ref, 1 / 255 / 0.225)  # in levels, through the smallest std
    if backend == "pil":
        assert mx < 1e-3  # PIL's arithmetic: exact up to float32 rounding
    else:
        assert mae < 1.0 and mx <= 8  # torch's uint8 resize rounds differently (the stated tolerance)


@pytest.mark.parametrize(
    "use_v2, tensor", [(False, False), (True, False), (True, True)], ids=["v1-pil", "v2-pil", "v2-tensor"]
)
def test_random_transforms_translate_with_torchvisions_parameters(folder, use_v2, tensor):
    """ColorJitter, RandomGrayscale, GaussianBlur, RandomRotation, RandomAffine and RandomErasing (value per
    channel) from real torchvision: chute's twins with the same parameters, backend from where they stand,
    api from the module; the pipeline takes the fast path with torch's structure."""

    T = torchvision.transforms.v2 if use_v2 else torchvision.transforms  # noqa: N806
    mode = T.InterpolationMode.BILINEAR
    jitter_hue = 0.0 if tensor else 0.1  # chute's hue is Pillow's HSV round trip: PIL images only
    head = [T.PILToTensor()] if tensor else []
    tail = [T.PILToTensor()] if not tensor else []
    to_float = T.ToDtype(torch.float32, scale=True) if use_v2 else T.ConvertImageDtype(torch.float32)
    compose = T.Compose(
        head
        + [
            T.Resize(48),
            T.CenterCrop(40),
            T.ColorJitter(0.4, 0.3, 0.2, jitter_hue),
            T.RandomGrayscale(0.2),
            T.GaussianBlur(5, (0.1, 2.0)),
            T.RandomRotation(15, interpolation=mode, fill=(10, 20, 30)),
            T.RandomAffine(10, translate=(0.1, 0.2), scale=(0.9, 1.1), shear=(-5, 5, -3, 3)),
        ]
        + tail
        + [
            to_float,
            T.Normalize(MEAN.flatten().tolist(), STD.flatten().tolist()),
            T.RandomErasing(0.3, value=(1, 2, 3)),
        ]
    )
    got = translate.translate(compose, "pil")
    assert isinstance(got, tuple), str(got)
    options = {"backend": "tensor" if tensor else "pil", "api": "v2" if use_v2 else "v1"}
    want = [
        chute.Resize(48),
        chute.CenterCrop(40),
        chute.ColorJitter(0.4, 0.3, 0.2, jitter_hue, **options),
        chute.RandomGrayscale(0.2, **options),
        chute.GaussianBlur(5, (0.1, 2.0), api=options["api"]),
        chute.RandomRotation(15, "bilinear", fill=(10, 20, 30), **options),
        chute.RandomAffine(10, translate=(0.1, 0.2), scale=(0.9, 1.1), shear=(-5, 5, -3, 3), **options),
        chute.Normalize(MEAN.flatten().tolist(), STD.flatten().tolist()),
        chute.RandomErasing(0.3, value=(1, 2, 3)),
    ]

    def described(ts):
        return [(type(t).__name__, dict(vars(t))) for t in ts]

    assert described(got[0]) == described(want)
    fast, ref = fast_and_ref(datasets.ImageFolder(folder, transform=compose), batch_size=8)
    check_structure(fast, ref)


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
def test_the_reference_imagenet_recipe_with_mixup_cutmix_takes_the_fast_path(folder, use_v2):
    """train.py's ImageNet recipe: the preset with TrivialAugmentWide and RandomErasing, and its collate_fn
    (MixUp or CutMix after default_collate, in a closure) through chute.DataLoader: the fast path, with the
    shapes and dtypes of torch's DataLoader (soft labels)."""
    from torch.utils.data.dataloader import default_collate
    from torchvision.transforms import v2

    mixup_cutmix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=3), v2.CutMix(alpha=1.0, num_classes=3)])

    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))

    preset = Train(crop_size=CROP, auto_augment_policy="ta_wide", random_erase_prob=0.1, use_v2=use_v2)
    dataset = datasets.ImageFolder(folder, transform=preset)
    ours = chute.DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=collate_fn, drop_last=True)
    assert ours.stats()["path"] == "fast:imagefolder", ours.stats()["fallback_reason"]
    fast = list(ours)
    ref = list(DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=collate_fn, drop_last=True))
    assert len(fast) == len(ref)
    for (images, labels), (ref_images, ref_labels) in zip(fast, ref):
        assert images.shape == ref_images.shape == (8, 3, CROP, CROP) and images.dtype == ref_images.dtype
        assert labels.shape == ref_labels.shape == (8, 3) and labels.dtype == ref_labels.dtype
        assert torch.allclose(labels.sum(1), torch.ones(8))
