"""MixUp / CutMix after collation on the ImageFolder fast path: the reference recipe's collate_fn is recognised
by its shape (never called), the engine mixes each batch with torchvision's arithmetic (bit-exact for given
draws), its draws follow torchvision's distributions, and any other collate_fn falls back with its reason.

Where torchvision imports (.venv-tv) the classes are its own; elsewhere chute.bench.mix_reference's
transcription stands in (as_torchvision(): same names, modules and attributes)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset, default_collate

import chute
from chute import _native
from chute.bench import mix_reference
from chute.bench.pil_reference import as_torchvision, real_torchvision
from chute.dataloader import mixing
from chute.dataloader import plan as seam

T = real_torchvision() or as_torchvision()
V2 = mix_reference.real_torchvision() or mix_reference.as_torchvision()
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TRAIN = [T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]

mixup_cutmix = V2.RandomChoice([V2.MixUp(alpha=0.2, num_classes=3), V2.CutMix(alpha=1.0, num_classes=3)])
module_level_lambda = lambda batch: mixup_cutmix(*default_collate(batch))  # noqa: E731


def reference_collate(mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=3):
    """The collate_fn of torchvision's reference train.py (references/classification), with use_v2=True."""
    mixes = []
    if mixup_alpha > 0:
        mixes.append(V2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
    if cutmix_alpha > 0:
        mixes.append(V2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
    mixup_cutmix = V2.RandomChoice(mixes)

    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))

    return collate_fn


def dataset(folder, transform=TRAIN):
    return T.ImageFolder(folder, transform=T.Compose(transform))


def test_the_reference_shapes_take_the_fast_path(folder):
    ds = dataset(folder)
    renamed = V2.MixUp(alpha=1.0, num_classes=3)
    for collate in (
        module_level_lambda,
        reference_collate(),
        reference_collate(cutmix_alpha=0),  # MixUp alone
        reference_collate(mixup_alpha=0),  # CutMix alone
        lambda b: renamed(*default_collate(b)),  # other names, in a closure
    ):
        loader = chute.DataLoader(ds, batch_size=4, collate_fn=collate)
        assert loader.stats()["path"] == "fast:imagefolder", loader.stats()["fallback_reason"]


def test_the_collate_fn_is_never_called(folder, monkeypatch):
    def untouchable(*args, **kwargs):
        raise AssertionError("chute called the batch transform")

    mixup = V2.MixUp(alpha=1.0, num_classes=3)
    collate = lambda b: mixup(*default_collate(b))  # noqa: E731
    monkeypatch.setattr(V2.MixUp, "__call__", untouchable)
    loader = chute.DataLoader(dataset(folder), batch_size=6, collate_fn=collate)
    assert loader.stats()["path"] == "fast:imagefolder"
    batches = list(loader)  # mixed natively: no call
    assert len(batches) == 6 and all(type(b) is tuple for b in batches)


def _my_collate(batch):
    return default_collate(batch)


@pytest.mark.parametrize(
    "collate, reason",
    [
        (lambda b: mixup_cutmix(default_collate(b)), "custom collate_fn"),  # no star: not the recipe
        (lambda b: mixup_cutmix(*_my_collate(b)), "custom collate_fn"),  # not torch's default_collate
        (lambda b, f=mixup_cutmix: f(*default_collate(b)), "custom collate_fn"),  # a default argument
        (functools.partial(mixing.collate, mixup_cutmix), "custom collate_fn"),
        (lambda b: V2.MixUp(alpha=1.0)(*default_collate(b)), "custom collate_fn"),  # three names
        (lambda b: T.RandomHorizontalFlip()(*default_collate(b)), "custom collate_fn"),
    ],
)
def test_other_collate_fns_fall_back_with_their_reason(folder, collate, reason):
    loader = chute.DataLoader(dataset(folder), batch_size=4, collate_fn=collate)
    assert loader.stats()["path"] == "generic"
    assert reason in loader.stats()["fallback_reason"]


def test_transforms_chute_does_not_run_fall_back_naming_them(folder):
    no_classes = V2.MixUp(alpha=1.0)  # torchvision raises on index labels without num_classes
    getter = V2.CutMix(alpha=1.0, num_classes=3, labels_getter=lambda inputs: inputs[1])
    flip = T.RandomHorizontalFlip()
    cases = [
        (lambda b: no_classes(*default_collate(b)), "num_classes"),
        (lambda b: getter(*default_collate(b)), "custom labels_getter"),
        (lambda b: flip(*default_collate(b)), "only torchvision.transforms.v2's MixUp, CutMix"),
    ]
    for collate, reason in cases:
        loader = chute.DataLoader(dataset(folder), batch_size=4, collate_fn=collate)
        assert reason in str(loader.stats()["fallback_reason"]), loader.stats()["fallback_reason"]
    uint8 = dataset(folder, [T.Resize(40), T.CenterCrop(32), T.PILToTensor()])
    mixup = V2.MixUp(alpha=1.0, num_classes=3)
    loader = chute.DataLoader(uint8, batch_size=4, collate_fn=lambda b: mixup(*default_collate(b)))
    assert "MixUp after default_collate on torch.uint8 images" in loader.stats()["fallback_reason"]
    cutmix = V2.CutMix(alpha=1.0, num_classes=3)  # CutMix copies: uint8 is fine
    loader = chute.DataLoader(uint8, batch_size=4, collate_fn=lambda b: cutmix(*default_collate(b)))
    assert loader.stats()["path"] == "fast:imagefolder"
    images, labels = next(iter(loader))
    assert images.dtype == torch.uint8 and labels.dtype == torch.float32 and labels.shape == (4, 3)
    tensors = chute.DataLoader(
        TensorDataset(torch.randn(8, 3, 4, 4), torch.arange(8) % 3),
        batch_size=4,
        collate_fn=lambda b: mixup_cutmix(*default_collate(b)),
    )
    assert "ImageFolder path only" in tensors.stats()["fallback_reason"]


def _epoch_pairs(folder, collate, batch_size, **kwargs):
    """The mixed batches of one epoch and the same epoch without the mix (same generator seed: same order,
    same per-sample draws), with the draws the engine made for each batch."""
    ds = dataset(folder)
    mixed_loader = chute.DataLoader(
        ds, batch_size=batch_size, collate_fn=collate, generator=torch.Generator().manual_seed(5), **kwargs
    )
    plain = chute.DataLoader(ds, batch_size=batch_size, generator=torch.Generator().manual_seed(5), **kwargs)
    base_seed = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(5)).item()
    mixed, unmixed = list(mixed_loader), list(plain)
    native = mixed_loader._plan()._batch_transform.native
    n, draws, end = len(ds), [], 0
    for images, _ in unmixed:
        end = min(end + len(images), n)
        kind, lam, label_lam, box = _native.draw_batch_mix(
            native, base_seed & (2**64 - 1), 0, end, images.shape[2], images.shape[3]
        )
        draws.append((kind, lam, label_lam, box))
    return mixed, unmixed, draws


@pytest.mark.parametrize("batch_size", [5, 8])
def test_batches_are_torchvisions_formula_with_the_engines_draws(folder, batch_size):
    """Each mixed batch equals torchvision's MixUp / CutMix (the transcription in mix_reference, real
    torchvision's arithmetic in the tv tier) applied to the unmixed batch with the draws the engine made,
    bit for bit: images, soft labels, dtypes, shapes and the tuple."""
    mixed, unmixed, draws = _epoch_pairs(folder, reference_collate(), batch_size, shuffle=True)
    assert len(mixed) == len(unmixed) == math.ceil(36 / batch_size)
    kinds = set()
    for (images, soft), (plain, labels), (kind, lam, label_lam, box) in zip(mixed, unmixed, draws):
        assert type((images, soft)) is tuple
        kinds.add(kind)
        if kind == "mixup":
            ref_images, ref_labels = mix_reference.mixup(plain.clone(), labels, lam, 3)
            assert label_lam == lam
        else:
            ref_images, ref_labels = mix_reference.cutmix(plain.clone(), labels, box, 3)
        assert images.dtype == ref_images.dtype == torch.float32 and images.shape == ref_images.shape
        assert torch.equal(images, ref_images), kind
        assert soft.dtype == torch.float32 and soft.shape == (len(labels), 3)
        assert torch.equal(soft, ref_labels), kind
    assert kinds == {"mixup", "cutmix"}  # both drawn over the epoch (seeded: always the same draws)


def test_forced_draws_match_the_formula_on_any_batch():
    """The engine's arithmetic alone, with lam and boxes forced, against the transcription."""
    gen = torch.Generator().manual_seed(0)
    for shape, layout in (((6, 3, 7, 9), "NCHW"), ((1, 3, 5, 5), "NCHW"), ((4, 7, 9, 3), "NHWC")):
        x = torch.randn(shape, generator=gen)
        nchw = x if layout == "NCHW" else x.permute(0, 3, 1, 2)
        for lam in (0.0, 0.123456789, 0.5, 0.999, 1.0):
            got = x.clone()
            _native.apply_batch_mix(got.numpy(), "mixup", lam, (0, 0, 0, 0), layout)
            ref, _ = mix_reference.mixup(nchw.clone(), torch.zeros(shape[0], dtype=torch.int64), lam, 2)
            assert torch.equal(got if layout == "NCHW" else got.permute(0, 3, 1, 2), ref), (shape, lam)
        for box in ((0, 0, 0, 0), (1, 2, 5, 4), (0, 0, nchw.shape[3], nchw.shape[2]), (3, 1, 4, 5)):
            for dtype in (torch.float32, torch.uint8):
                y = (x * 40 + 100).to(dtype)
                got = y.clone()
                _native.apply_batch_mix(got.numpy(), "cutmix", 0.5, box, layout)
                ynchw = y if layout == "NCHW" else y.permute(0, 3, 1, 2)
                ref, _ = mix_reference.cutmix(ynchw.clone(), torch.zeros(shape[0], dtype=torch.int64), box, 2)
                assert torch.equal(got if layout == "NCHW" else got.permute(0, 3, 1, 2), ref), (shape, box)


def _ks_statistic(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = torch.sort(a.double()).values, torch.sort(b.double()).values
    grid = torch.cat([a, b])
    fa = torch.searchsorted(a, grid, right=True).double() / len(a)
    fb = torch.searchsorted(b, grid, right=True).double() / len(b)
    return float((fa - fb).abs().max())


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_draws_follow_torchvisions_distributions(alpha):
    """lam against torch's Beta(alpha, alpha) (what torchvision samples), RandomChoice's p, and CutMix's box
    and corrected label weight as torchvision computes them from lam and a uniform centre."""
    n = 6000
    native = _native.BatchMix([("mixup", alpha), ("cutmix", alpha)], [1.0, 3.0])
    draws = [_native.draw_batch_mix(native, 123, 4, k, 24, 32) for k in range(n)]
    lams = torch.tensor([d[1] for d in draws])
    torch_lams = torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha])).sample((n,)).flatten()
    # 1.73 / sqrt(n / 2) is the 0.1% critical value of the two-sample KS test: fixed seeds, so it never flakes
    # once it passes, and a wrong distribution (alpha confused with 1 / alpha, a uniform) fails by far.
    assert _ks_statistic(lams, torch_lams) < 1.95 / math.sqrt(n / 2), alpha
    cut = [d for d in draws if d[0] == "cutmix"]
    assert abs(len(cut) / n - 0.75) < 4 * math.sqrt(0.75 * 0.25 / n)
    for _, lam, label_lam, (x1, y1, x2, y2) in cut:
        r = 0.5 * math.sqrt(1.0 - lam)
        assert 0 <= x1 <= x2 <= 32 and 0 <= y1 <= y2 <= 24
        assert x2 - x1 <= 2 * int(r * 32) and y2 - y1 <= 2 * int(r * 24)
        assert label_lam == 1.0 - (x2 - x1) * (y2 - y1) / (32 * 24)


def test_same_generator_same_batches_new_epoch_new_draws(folder):
    def run(seed):
        loader = chute.DataLoader(
            dataset(folder),
            batch_size=6,
            shuffle=True,
            collate_fn=reference_collate(),
            generator=torch.Generator().manual_seed(seed),
        )
        return [list(loader) for _ in range(2)]

    a, b = run(1), run(1)
    for ea, eb in zip(a, b):
        for (ia, la), (ib, lb) in zip(ea, eb):
            assert torch.equal(ia, ib) and torch.equal(la, lb)
    assert not all(torch.equal(x[1], y[1]) for x, y in zip(a[0], a[1]))  # epoch 2 draws anew


def test_batches_of_varying_sizes_run_the_recipe_in_process(folder):
    sizes = [5, 3, 8]
    sampler = [list(range(s, s + k)) for s, k in zip((0, 5, 8), sizes)]
    loader = chute.DataLoader(dataset(folder), batch_sampler=sampler, collate_fn=reference_collate())
    assert loader.stats()["path"] == "fast:imagefolder"
    batches = list(loader)
    assert [len(b[1]) for b in batches] == sizes
    assert all(type(b) is tuple and b[1].shape[1] == 3 and b[1].dtype == torch.float32 for b in batches)


def test_a_label_outside_num_classes_raises_at_its_batch_as_torchvision(folder):
    too_few = V2.MixUp(alpha=1.0, num_classes=2)  # the folder has labels 0, 1, 2
    sampler = BatchSampler(SequentialSampler(range(36)), batch_size=12, drop_last=False)
    loader = chute.DataLoader(dataset(folder), batch_sampler=sampler, collate_fn=lambda b: too_few(*default_collate(b)))
    assert loader.stats()["path"] == "fast:imagefolder"
    it = iter(loader)
    assert next(it)[1].shape == (12, 2)  # labels 0
    assert next(it)[1].shape == (12, 2)  # labels 1
    with pytest.raises(RuntimeError, match="num_classes"):
        next(it)  # labels 2: torch's one_hot raises
    torch_it = iter(
        DataLoader(dataset(folder), batch_sampler=sampler, collate_fn=lambda b: too_few(*default_collate(b)))
    )
    next(torch_it), next(torch_it)
    with pytest.raises(RuntimeError, match="num_classes"):
        next(torch_it)


def test_subset_with_the_recipe(folder):
    sub = torch.utils.data.Subset(dataset(folder), list(range(0, 36, 2)))
    loader = chute.DataLoader(sub, batch_size=6, collate_fn=reference_collate())
    assert loader.stats()["path"] == "fast:imagefolder"
    assert [b[1].shape for b in loader] == [(6, 3)] * 3


def test_recognise_tells_the_recipe_from_other_functions():
    found = mixing.recognise(module_level_lambda)
    assert isinstance(found, mixing.BatchTransform) and found.transform is mixup_cutmix and found.num_classes == 3
    assert mixing.recognise(default_collate) is None
    assert mixing.recognise(print) is None
    plan = seam.choose(DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2, collate_fn=module_level_lambda))
    assert isinstance(plan, seam.Fallback) and "ImageFolder path only" in str(plan)
