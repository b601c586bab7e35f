"""The augmentations draw what torchvision draws, in distribution: which op, which magnitude bin, the sign,
the probabilities (AutoAugment's sub-policies, RandAugment, TrivialAugmentWide), AugMix's chains and its
Dirichlet and Beta weights, the random transforms' parameters and RandomErasing's rectangles. chute's draws
(its per-sample stream, keyed by (seed, epoch, index)) against chute.bench.augment_policy_reference's
transcription of torchvision's sampling code on torch's RNG, by a chi-square test of homogeneity; both
sides are seeded, so the test is deterministic. Each test also shows it can fail: chute's draws against a
different distribution are rejected. The real-torchvision tier repeats the comparison against torchvision's
own forward (test_torchvision_augment_real.py)."""

from __future__ import annotations

import collections
import math

import pytest
import torch

import chute
from chute import _native
from chute.bench import augment_policy_reference as ref

SIZE = (224, 224)  # (width, height)
ALPHA = 1e-4  # a true homogeneity fails a test with this probability; the tests are deterministic anyway


def chi_square_p(a: collections.Counter, b: collections.Counter, min_expected: float = 5.0) -> float:
    """The p-value of Pearson's chi-square test that the two samples' categories share one distribution;
    categories too rare for the test are pooled into one."""
    na, nb = sum(a.values()), sum(b.values())
    rare, cells = [0, 0], []
    for key in set(a) | set(b):
        total = a[key] + b[key]
        if total * min(na, nb) / (na + nb) < min_expected:
            rare[0] += a[key]
            rare[1] += b[key]
        else:
            cells.append((a[key], b[key]))
    if sum(rare):
        cells.append(tuple(rare))
    stat = 0.0
    for oa, ob in cells:
        total = oa + ob
        for observed, n in ((oa, na), (ob, nb)):
            expected = total * n / (na + nb)
            stat += (observed - expected) ** 2 / expected
    df = len(cells) - 1
    if df == 0:
        return 1.0  # one category on both sides: identical
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2)))


def chute_draws(transform, count: int, seed: int = 0):
    return _native.transform_draws(transform._to_native(), SIZE[0], SIZE[1], seed, 0, 0, count)


def reference_draws(draw, count: int, seed: int = 0):
    torch.manual_seed(seed)
    return [draw() for _ in range(count)]


def key(op, magnitude) -> tuple:
    return op, round(magnitude, 5)


def bins(value: float, lo: float, hi: float, n: int = 20) -> int:
    return min(n - 1, max(0, int((value - lo) / (hi - lo) * n)))


@pytest.mark.parametrize("num_bins", [31, 7])
def test_trivial_augment_wide_draws_ops_bins_and_signs_as_torchvision(num_bins):
    n = 20000
    ours = collections.Counter(key(*d[0]) for d in chute_draws(chute.TrivialAugmentWide(num_bins), n))
    theirs = collections.Counter(
        key(*d[0]) for d in reference_draws(lambda: ref.TrivialAugmentWide(num_bins).draw(*SIZE[::-1]), n)
    )
    assert set(ours) == set(theirs)
    assert chi_square_p(ours, theirs) > ALPHA
    # The test has power: RandAugment's single bin is not TrivialAugmentWide's spread.
    other = collections.Counter(key(*d[0]) for d in reference_draws(lambda: ref.RandAugment(1).draw(*SIZE[::-1]), n))
    assert chi_square_p(ours, other) < 1e-9


@pytest.mark.parametrize("num_ops,magnitude,num_bins", [(2, 9, 31), (3, 5, 10)])
def test_rand_augment_draws_as_torchvision(num_ops, magnitude, num_bins):
    n = 15000
    t = chute.RandAugment(num_ops, magnitude, num_bins)
    ours_draws = chute_draws(t, n)
    assert all(len(d) == num_ops for d in ours_draws)
    ours = collections.Counter(key(*op) for d in ours_draws for op in d)
    theirs = collections.Counter(
        key(*op)
        for d in reference_draws(lambda: ref.RandAugment(num_ops, magnitude, num_bins).draw(*SIZE[::-1]), n)
        for op in d
    )
    assert set(ours) == set(theirs)
    assert chi_square_p(ours, theirs) > ALPHA


@pytest.mark.parametrize("policy", ["imagenet", "cifar10", "svhn"])
def test_auto_augment_draws_sub_policies_with_their_probabilities(policy):
    """The whole draw of a sample (which ops applied, in order, at which signed magnitude): the sub-policy,
    its two coins and signs together."""
    n = 20000
    ours = collections.Counter(tuple(key(*op) for op in d) for d in chute_draws(chute.AutoAugment(policy), n))
    theirs = collections.Counter(
        tuple(key(*op) for op in d) for d in reference_draws(lambda: ref.AutoAugment(policy).draw(*SIZE[::-1]), n)
    )
    assert chi_square_p(ours, theirs) > ALPHA
    other_policy = "svhn" if policy != "svhn" else "cifar10"
    other = collections.Counter(
        tuple(key(*op) for op in d) for d in reference_draws(lambda: ref.AutoAugment(other_policy).draw(*SIZE[::-1]), n)
    )
    assert chi_square_p(ours, other) < 1e-9


@pytest.mark.parametrize("alpha,severity,width,depth", [(1.0, 3, 3, -1), (0.5, 10, 2, 2), (3.0, 1, 4, -1)])
def test_augmix_chains_and_weights_as_torchvision(alpha, severity, width, depth):
    n = 8000
    t = chute.AugMix(severity=severity, mixture_width=width, chain_depth=depth, alpha=alpha)
    ours = chute_draws(t, n)
    theirs = reference_draws(lambda: ref.AugMix(severity, width, depth, alpha).draw(*SIZE[::-1]), n)

    def counters(draws):
        depths = collections.Counter(d for x in draws for d in x["chain_depths"])
        ops = collections.Counter(key(*op) for x in draws for op in x["ops"])
        beta = collections.Counter(bins(x["original_weight"], 0, 1) for x in draws)
        chain = collections.Counter(bins(w, 0, 1) for x in draws for w in x["chain_weights"])
        return depths, ops, beta, chain

    for name, a, b in zip(("depths", "ops", "beta", "dirichlet"), counters(ours), counters(theirs)):
        assert chi_square_p(a, b) > ALPHA, name
    for x in ours[:100]:
        assert math.isclose(x["original_weight"] + sum(x["chain_weights"]), 1.0, rel_tol=1e-5)
    # Power: Beta(alpha, alpha) of another alpha is rejected.
    other = reference_draws(lambda: ref.AugMix(severity, width, depth, alpha * 4).draw(*SIZE[::-1]), n)
    assert chi_square_p(counters(ours)[2], counters(other)[2]) < 1e-9


def test_color_jitter_order_and_factors_as_torchvision():
    n = 20000
    ranges = dict(brightness=0.4, contrast=(0.5, 1.5), saturation=0.3, hue=0.1)
    t = chute.ColorJitter(**ranges)
    names = {"adjust_brightness": 0, "adjust_contrast": 1, "adjust_saturation": 2, "adjust_hue": 3}
    ours_order, ours_factor = collections.Counter(), collections.Counter()
    for ops in chute_draws(t, n):
        ours_order[tuple(names[op["op"]] for op in ops)] += 1
        for op in ops:
            ours_factor[(op["op"], bins(op["factor"], -0.5, 2.0, 50))] += 1
    theirs_order, theirs_factor = collections.Counter(), collections.Counter()
    for order, factors in reference_draws(
        lambda: ref.color_jitter_params(t.brightness, t.contrast, t.saturation, t.hue), n
    ):
        theirs_order[tuple(order)] += 1
        for i, f in enumerate(factors):
            theirs_factor[(list(names)[i], bins(f, -0.5, 2.0, 50))] += 1
    assert len(ours_order) == 24
    assert chi_square_p(ours_order, theirs_order) > ALPHA
    assert chi_square_p(ours_factor, theirs_factor) > ALPHA


def test_random_affine_and_rotation_parameters_as_torchvision():
    n = 20000
    t = chute.RandomAffine(degrees=25, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-10, 10, -5, 5))
    ours = collections.Counter()
    for (op,) in chute_draws(t, n):
        ours[("angle", bins(op["angle"], -25, 25))] += 1
        ours[("tx", op["translate"][0])] += 1
        ours[("ty", op["translate"][1])] += 1
        ours[("scale", bins(op["scale"], 0.8, 1.2))] += 1
        ours[("shear_x", bins(op["shear"][0], -10, 10))] += 1
        ours[("shear_y", bins(op["shear"][1], -5, 5))] += 1
    theirs = collections.Counter()
    for angle, (tx, ty), scale, (sx, sy) in reference_draws(
        lambda: ref.random_affine_params([-25, 25], (0.1, 0.2), (0.8, 1.2), [-10, 10, -5, 5], *SIZE), n
    ):
        theirs[("angle", bins(angle, -25, 25))] += 1
        theirs[("tx", tx)] += 1
        theirs[("ty", ty)] += 1
        theirs[("scale", bins(scale, 0.8, 1.2))] += 1
        theirs[("shear_x", bins(sx, -10, 10))] += 1
        theirs[("shear_y", bins(sy, -5, 5))] += 1
    assert chi_square_p(ours, theirs) > ALPHA
    rotation = collections.Counter(
        bins(op["angle"], -30, 10) for (op,) in chute_draws(chute.RandomRotation((-30, 10)), n)
    )
    uniform = collections.Counter(
        bins(v, -30, 10) for v in (torch.rand(n, generator=torch.Generator().manual_seed(1)) * 40 - 30).tolist()
    )
    assert chi_square_p(rotation, uniform) > ALPHA


def test_grayscale_and_blur_parameters():
    n = 20000
    gray = sum(1 for ops in chute_draws(chute.RandomGrayscale(0.3), n) if ops)
    assert abs(gray / n - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)
    sigmas = collections.Counter(bins(ops[0]["sigma"][0], 0.1, 2.0) for ops in chute_draws(chute.GaussianBlur(5), n))
    uniform = collections.Counter(
        bins(v, 0.1, 2.0) for v in (torch.rand(n, generator=torch.Generator().manual_seed(2)) * 1.9 + 0.1).tolist()
    )
    assert chi_square_p(sigmas, uniform) > ALPHA


@pytest.mark.parametrize("p,scale,ratio", [(0.5, (0.02, 0.33), (0.3, 3.3)), (1.0, (0.3, 0.9), (0.5, 2.0))])
def test_random_erasing_rectangles_as_torchvision(p, scale, ratio):
    """The coin, the ten tries (a large scale often finds no fit: no erasing) and the rectangle's size."""
    n = 20000
    t = chute.RandomErasing(p=p, scale=scale, ratio=ratio)

    def summary(box):
        if box is None:
            return ("none",)
        top, left, h, w = box
        return bins(h, 0, SIZE[1], 12), bins(w, 0, SIZE[0], 12)

    ours = collections.Counter(summary(b) for b in chute_draws(t, n))
    theirs = collections.Counter(
        summary(b) for b in reference_draws(lambda: ref.random_erasing_box(SIZE[1], SIZE[0], p, scale, ratio), n)
    )
    assert chi_square_p(ours, theirs) > ALPHA


def test_draws_are_keyed_by_seed_epoch_and_index():
    t = chute.TrivialAugmentWide()._to_native()
    a = _native.transform_draws(t, 224, 224, 5, 1, 100, 50)
    assert a == _native.transform_draws(t, 224, 224, 5, 1, 100, 50)
    assert a[10:] == _native.transform_draws(t, 224, 224, 5, 1, 110, 40)  # any sample, alone
    assert a != _native.transform_draws(t, 224, 224, 5, 2, 100, 50)
    assert a != _native.transform_draws(t, 224, 224, 6, 1, 100, 50)
