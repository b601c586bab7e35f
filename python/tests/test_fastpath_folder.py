"""The torchvision ImageFolder fast path: which pipelines it takes (and why not the others), and that its
batches have torchvision's dtype, shape, labels and order, with pixels within the stated tolerance.

Where torchvision imports (.venv-tv, scripts/test_torchvision.sh) the tests run against its real classes;
elsewhere (the main venv's torch 2.13) chute.bench.pil_reference stands in for it (as_torchvision(): the same
class names, modules and attributes, with torchvision's semantics implemented on PIL, the reference here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, SubsetRandomSampler

import chute
from chute.bench.pil_reference import as_torchvision, real_torchvision
from chute.dataloader import plan as seam
from chute.dataloader import translate

T = real_torchvision() or as_torchvision()

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
EVAL = [T.Resize(64), T.CenterCrop(56)]


def epoch(plan, loader: DataLoader):
    """One epoch as chute.DataLoader runs it (its PlanIter: base seed, sampler iterator, plan.batches)."""
    base_seed = torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
    return plan.batches(iter(loader._index_sampler), base_seed=base_seed)


def fast_and_ref(dataset, make_sampler=None, **kwargs):
    """The fast path's batches and torch's, with the same generator seed (same sampler order); a sampler
    with its own state comes from `make_sampler`, one for each run."""
    if make_sampler is not None:
        kwargs["sampler"] = make_sampler()
    loader = DataLoader(dataset, generator=torch.Generator().manual_seed(3), **kwargs)
    plan = seam.choose(loader)
    assert isinstance(plan, seam.Plan), str(plan)
    assert plan.kind == "imagefolder"
    try:
        fast = list(epoch(plan, loader))
    finally:
        plan.close()
    if make_sampler is not None:
        kwargs["sampler"] = make_sampler()
    ref = list(DataLoader(dataset, generator=torch.Generator().manual_seed(3), **kwargs))
    return fast, ref


def check_structure(fast, ref):
    assert len(fast) == len(ref)
    for f, r in zip(fast, ref):
        assert type(f) is type(r) is list and len(f) == len(r) == 2
        assert f[0].dtype == r[0].dtype and f[0].shape == r[0].shape and f[0].stride() == r[0].stride()
        assert f[1].dtype == r[1].dtype == torch.int64
        assert torch.equal(f[1], r[1])  # labels, and so the order


def pixel_error(fast, ref, scale: float) -> tuple[float, float]:
    """Mean and max absolute difference, in 0-255 units (`scale`: what one unit is in the output)."""
    d = torch.cat([(f[0].double() - r[0].double()).abs().flatten() for f, r in zip(fast, ref)]) / scale
    return float(d.mean()), float(d.max())


@pytest.mark.parametrize("shuffle", [False, True])
def test_eval_uint8_matches_the_pil_pipeline(folder, shuffle):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.PILToTensor()]))
    fast, ref = fast_and_ref(ds, batch_size=5, shuffle=shuffle)
    check_structure(fast, ref)
    mae, mx = pixel_error(fast, ref, 1.0)
    print(f"\n[fastpath parity] uint8 Resize(64)+CenterCrop(56): MAE={mae:.4f} max={mx:.0f}")
    assert mae < 1.0 and mx <= 8


def test_eval_float_normalised_matches_the_pil_pipeline(folder):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.ToTensor(), T.Normalize(MEAN, STD)]))
    fast, ref = fast_and_ref(ds, batch_size=8, drop_last=True)
    check_structure(fast, ref)
    assert len(fast) == 36 // 8
    mae, mx = pixel_error(fast, ref, 1.0 / 255 / min(STD))  # 0-255 units (upper bound on every channel)
    print(f"\n[fastpath parity] float32 Resize+CenterCrop+ToTensor+Normalize: MAE<={mae:.4f} max<={mx:.2f}")
    assert mae < 1.0 and mx <= 8


@pytest.mark.parametrize(
    "tail",
    [
        [T.ToTensor()],
        [T.PILToTensor(), T.ConvertImageDtype(torch.float32)],
        [T.ToTensor(), T.ConvertImageDtype(torch.float32)],
    ],
    ids=["ToTensor", "PILToTensor+ConvertImageDtype", "ToTensor+ConvertImageDtype"],
)
def test_float_in_unit_range(folder, tail):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + tail))
    fast, ref = fast_and_ref(ds, batch_size=7)
    check_structure(fast, ref)
    assert fast[-1][0].shape[0] == 36 % 7
    mae, mx = pixel_error(fast, ref, 1.0 / 255)
    assert mae < 1.0 and mx <= 8
    assert all(0.0 <= float(b[0].min()) and float(b[0].max()) <= 1.0 for b in fast)


def test_samplers_and_batch_sampler_order(folder):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.PILToTensor()]))
    fast, ref = fast_and_ref(
        ds,
        batch_size=4,
        make_sampler=lambda: SubsetRandomSampler(list(range(0, 36, 3)), generator=torch.Generator().manual_seed(1)),
    )
    check_structure(fast, ref)
    batches = [[35, 0, 0], [-1, 7, 20], [2]]
    fast, ref = fast_and_ref(ds, batch_sampler=batches)
    check_structure(fast, ref)
    mae, _ = pixel_error(fast, ref, 1.0)
    assert mae < 1.0


def test_uneven_batch_sampler_runs_torchs_path_in_process(folder):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.PILToTensor()]))
    fast, ref = fast_and_ref(ds, batch_sampler=[[1, 2], [3, 4, 5], [6]])
    check_structure(fast, ref)
    for f, r in zip(fast, ref):
        assert torch.equal(f[0], r[0])  # literally torch's pipeline


def test_out_of_range_index_raises_after_the_batches_before_it(folder):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.PILToTensor()]))
    loader = DataLoader(ds, batch_sampler=[[0, 1], [2, 36], [3, 4]])
    plan = seam.choose(loader)
    it = epoch(plan, loader)
    assert torch.equal(next(it)[1], torch.tensor([0, 0]))
    with pytest.raises(IndexError, match="index 36 is out of range for a dataset of 36 samples"):
        next(it)
    plan.close()


def test_random_pipeline_is_reproducible_with_a_generator_and_right_in_shape(folder):
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = T.ImageFolder(folder, transform=tf)

    def run(seed):
        loader = DataLoader(ds, batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(seed))
        plan = seam.choose(loader)
        try:
            return [list(epoch(plan, loader)) for _ in range(2)]
        finally:
            plan.close()

    a, b, c = run(1), run(1), run(2)
    ref = list(DataLoader(ds, batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(1)))
    check_structure(a[0], ref)
    for x, y in zip(a[0] + a[1], b[0] + b[1]):
        assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
    assert not torch.equal(a[0][0][0], a[1][0][0])  # epochs differ
    assert not torch.equal(a[0][0][0], c[0][0][0])  # seeds differ


def test_grayscale_and_png_files_become_rgb(tmp_path):
    for c, mode in enumerate(["L", "RGB"]):
        d = tmp_path / f"c{c}"
        d.mkdir()
        rng = np.random.default_rng(c)
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).convert(mode).save(d / "a.png")
        Image.fromarray(rng.integers(0, 255, (60, 45, 3), dtype=np.uint8)).convert("RGBA").save(d / "b.png")
    ds = T.ImageFolder(tmp_path, transform=T.Compose([T.Resize((30, 30)), T.PILToTensor()]))
    fast, ref = fast_and_ref(ds, batch_size=4)
    check_structure(fast, ref)
    mae, mx = pixel_error(fast, ref, 1.0)
    assert mae < 1.0 and mx <= 8


def test_bad_file_raises_sample_error_naming_it(tmp_path):
    d = tmp_path / "c0"
    d.mkdir()
    Image.new("RGB", (20, 20)).save(d / "good.jpg")
    (d / "zbad.jpg").write_bytes(b"not a jpeg at all")
    Image.new("RGB", (20, 20)).save(d / "zgood.jpg")
    ds = T.ImageFolder(tmp_path, transform=T.Compose([T.Resize((16, 16)), T.PILToTensor()]))
    loader = DataLoader(ds, batch_size=1)
    plan = seam.choose(loader)
    it = epoch(plan, loader)
    assert next(it)[0].shape == (1, 3, 16, 16)
    with pytest.raises(chute.SampleError, match="zbad.jpg"):
        next(it)
    assert next(it)[0].shape == (1, 3, 16, 16)  # as torch's iterator: the next call goes on
    with pytest.raises(StopIteration):
        next(it)
    plan.close()


class Custom(T.ImageFolder):
    def __getitem__(self, i):
        return super().__getitem__(i)


def reason(dataset, **kwargs) -> str:
    p = seam.choose(DataLoader(dataset, batch_size=2, **kwargs))
    assert isinstance(p, seam.Fallback), p
    assert "\n" not in str(p)
    return str(p)


@pytest.mark.parametrize(
    "transform, expected",
    [
        (None, "transform is None"),
        (T.Compose([T.Resize(64), T.CenterCrop(56)]), "no ToTensor/PILToTensor"),
        (
            T.Compose([T.Resize(64), T.ColorJitter(0.4), T.CenterCrop(56), T.ToTensor()]),
            "ColorJitter before CenterCrop",
        ),
        (
            T.Compose([T.RandomHorizontalFlip(), T.CenterCrop(56), T.ToTensor()]),
            "RandomHorizontalFlip before CenterCrop",
        ),
        (T.Compose([T.CenterCrop(56), T.PILToTensor(), T.Normalize(MEAN, STD)]), "Normalize on a uint8 tensor"),
        (T.Compose([T.CenterCrop(56), T.ToTensor(), T.Normalize(MEAN, STD), T.Normalize(MEAN, STD)]), "two Normalize"),
        (T.Compose([T.CenterCrop(56), T.PILToTensor(), T.ConvertImageDtype(torch.float16)]), "ConvertImageDtype"),
        (
            T.Compose([T.Resize(64, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(56), T.ToTensor()]),
            "transform Resize",
        ),
        (T.Compose([T.Resize(64), T.ToTensor()]), "native pipeline"),
        (T.Compose([T.CenterCrop(56), T.ToTensor(), T.Normalize((0.5,), (0.5,))]), "transform Normalize"),
        (T.Compose([T.CenterCrop(56), T.ToTensor(), T.CenterCrop(50)]), "CenterCrop on float32 tensors"),
        (T.Compose([T.CenterCrop(56), lambda x: x, T.ToTensor()]), "not a torchvision v1 or v2 transform"),
        ([T.CenterCrop(56), T.ToTensor()], "not a torchvision Compose"),
    ],
    ids=[
        "none",
        "no-tensor",
        "jitter",
        "flip-first",
        "norm-uint8",
        "two-norm",
        "fp16",
        "bicubic",
        "no-fixed-size",
        "norm-1ch",
        "tensor-crop",
        "lambda",
        "list",
    ],
)
def test_unsupported_transforms_fall_back_naming_them(folder, transform, expected):
    assert expected in reason(T.ImageFolder(folder, transform=transform))


def test_dataset_level_fallbacks(folder, tmp_path):
    tf = T.Compose(EVAL + [T.ToTensor()])
    assert "target_transform" in reason(T.ImageFolder(folder, transform=tf, target_transform=lambda y: y + 1))
    assert "custom loader" in reason(T.ImageFolder(folder, transform=tf, loader=lambda p: Image.open(p)))
    assert "overrides __getitem__" in reason(Custom(folder, transform=tf))
    d = tmp_path / "c0"
    d.mkdir()
    Image.new("RGB", (60, 60)).save(d / "a.bmp")
    assert "a.bmp: only JPEG, PNG and WebP" in reason(T.ImageFolder(tmp_path, transform=tf))
    assert "custom collate_fn" in reason(T.ImageFolder(folder, transform=tf), collate_fn=lambda b: b)


def test_translate_keeps_order_and_output_dtype():
    ts, dtype = translate.translate(
        T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(0.3), T.ToTensor(), T.Normalize(MEAN, STD)])
    )
    assert dtype == torch.float32
    assert [type(t).__name__ for t in ts] == ["RandomResizedCrop", "RandomHorizontalFlip", "Normalize"]
    assert ts[1].p == 0.3
    ts, dtype = translate.translate(
        T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor(), T.RandomHorizontalFlip()])
    )
    assert dtype == torch.uint8 and [type(t).__name__ for t in ts] == ["Resize", "CenterCrop", "RandomHorizontalFlip"]


def test_transform_swapped_between_epochs(folder, caplog):
    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.PILToTensor()]))
    loader = DataLoader(ds, batch_size=8)
    plan = seam.choose(loader)
    assert next(iter(epoch(plan, loader)))[0].shape == (8, 3, 56, 56)
    ds.transform = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])  # progressive resizing
    fast = list(epoch(plan, loader))
    check_structure(fast, list(DataLoader(ds, batch_size=8)))
    assert fast[0][0].shape == (8, 3, 32, 32) and fast[0][0].dtype == torch.float32
    bicubic = T.InterpolationMode.BICUBIC
    ds.transform = T.Compose([T.Resize(40, interpolation=bicubic), T.CenterCrop(32), T.ToTensor()])
    with caplog.at_level("WARNING", logger="chute.dataloader"):
        fast = list(epoch(plan, loader))
    assert "transform Resize" in caplog.text
    ref = list(DataLoader(ds, batch_size=8))
    check_structure(fast, ref)
    assert all(torch.equal(f[0], r[0]) for f, r in zip(fast, ref))
    plan.close()


def test_chute_dataloader_runs_the_fast_path_keyed_by_its_generator(folder):
    """End to end through chute.DataLoader: the fast path is chosen, its order is torch's, and its random
    crops follow the base seed the iterator draws from `generator` (same seed, same batches; new seed, new)."""
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    ds = T.ImageFolder(folder, transform=tf)

    def run(seed):
        loader = chute.DataLoader(ds, batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(seed))
        assert loader.stats()["path"] == "fast:imagefolder", loader.stats()
        return [[x.clone(), y.clone()] for x, y in loader]

    a, b, c = run(5), run(5), run(6)
    ref = list(DataLoader(ds, batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(5)))
    check_structure(a, ref)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
    assert not torch.equal(a[0][0], c[0][0])


def test_the_epoch_seed_counts_in_all_64_bits(folder):
    """torch's base seed is 64 bits; it is the engine's seed for the epoch (once it rode in the epoch, whose
    upper 32 bits the counter-based generator dropped: two seeds differing only there gave the same crops)."""
    ds = T.ImageFolder(
        folder, transform=T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])
    )
    loader = DataLoader(ds, batch_size=6)

    def crops(base_seed):
        plan = seam.choose(loader)
        try:
            return [b[0] for b in plan.batches(iter(loader._index_sampler), base_seed=base_seed)]
        finally:
            plan.close()

    low = 0x1234_5678
    a, b, high, negative = crops(low), crops(low), crops(low | (1 << 40)), crops(-low)
    assert all(torch.equal(x, y) for x, y in zip(a, b))  # the same seed: the same crops
    assert not all(torch.equal(x, y) for x, y in zip(a, high))
    assert not all(torch.equal(x, y) for x, y in zip(a, negative))  # torch's seeds may be negative


def test_paths_a_text_list_could_not_hold_take_the_fast_path(tmp_path):
    """The samples reach the engine in memory: a newline in a name (which a text file list cannot hold) is
    a name like any other, and the batches are torch's."""
    for c, cls in enumerate(["plain", "new\nline"]):
        d = tmp_path / cls
        d.mkdir()
        for k, name in enumerate(["a.jpg", "b\n.jpg", " c .png"]):
            color = (40 * c + 10 * k, 90, 200 - 30 * k)
            Image.new("RGB", (20 + k, 18), color).save(d / name, format="PNG" if name.endswith(".png") else "JPEG")
    ds = T.ImageFolder(tmp_path, transform=T.Compose([T.Resize((12, 12)), T.PILToTensor()]))
    fast, ref = fast_and_ref(ds, batch_size=4, shuffle=True)
    check_structure(fast, ref)
    assert pixel_error(fast, ref, 1.0)[1] <= 8
    loader = chute.DataLoader(ds, batch_size=4)
    stats = loader.stats()
    assert stats["path"] == "fast:imagefolder" and "engine batch ring" in stats["held_batches"]
    assert sum(len(y) for _, y in loader) == 6


def test_the_doctor_builds_its_chute_loader_with_the_fast_paths_translator(folder):
    from chute.doctor.compare import chute_equivalent

    no_tensor = T.ImageFolder(folder, transform=T.Compose(EVAL))
    loader, why = chute_equivalent(DataLoader(no_tensor, batch_size=4))
    assert loader is None and why == f"its transforms: {seam.choose(DataLoader(no_tensor, batch_size=4))}"

    ds = T.ImageFolder(folder, transform=T.Compose(EVAL + [T.PILToTensor()]))
    loader, why = chute_equivalent(DataLoader(ds, batch_size=4))
    assert why == "", why
    fast = chute.DataLoader(ds, batch_size=4)
    assert fast.stats()["path"] == "fast:imagefolder"
    pairs = list(zip(loader, fast))
    assert len(pairs) == len(fast) > 0
    for (a, la), (b, lb) in pairs:
        assert torch.equal(a, b) and torch.equal(la, lb)  # the same pipeline on the same engine


def test_fast_path_stats_keep_the_engines_auto_prefetch_for_the_verdict(folder):
    """Without a prefetch_factor the fast path runs auto prefetch: its merged stats say so (and its cap), so
    the verdict never advises 'raise prefetch' for it (the autotuner grows it below the cap)."""
    ds = T.ImageFolder(folder, transform=T.Compose([T.Resize((16, 16)), T.PILToTensor()]))
    loader = chute.DataLoader(ds, batch_size=2)
    for _ in loader:
        pass
    stats = loader.stats()
    assert stats["path"] == "fast:imagefolder"
    assert stats["auto_prefetch"] is True and stats["auto_threads"] is True
    assert stats["max_prefetch"] >= stats["prefetch"] >= 1


@pytest.mark.parametrize("num_workers, factor, subset", [(2, 1, False), (2, 3, False), (1, 5, False), (3, 1, True)])
def test_an_explicit_prefetch_factor_is_the_engines_prefetch_as_torch_defines_it(folder, num_workers, factor, subset):
    """torch loads prefetch_factor * num_workers batches ahead; an explicit prefetch_factor keeps that
    meaning on the fast path (the engine's prefetch, fixed: not auto), a Subset's included, and the
    batches are torch's."""
    ds = T.ImageFolder(folder, transform=T.Compose([T.Resize((16, 16)), T.PILToTensor()]))
    if subset:
        ds = torch.utils.data.Subset(ds, list(range(0, len(ds), 2)))
    loader = chute.DataLoader(ds, batch_size=2, num_workers=num_workers, prefetch_factor=factor)
    stats = loader.stats()
    assert stats["path"] == "fast:imagefolder", stats
    assert stats["prefetch"] == stats["max_prefetch"] == factor * num_workers
    assert stats["auto_prefetch"] is False
    fast = [[x.clone(), y.clone()] for x, y in loader]
    ref = list(DataLoader(ds, batch_size=2))
    check_structure(fast, ref)
    assert loader.stats()["prefetch"] == factor * num_workers  # set by hand: never tuned


# torch's own iterator, refusing prefetch_factor=0 in its constructor, trips on its __del__ afterwards
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_prefetch_factor_is_accepted_and_refused_as_in_torch(folder):
    """Unset, torch makes it 2 per worker and chute prefetches automatically; with num_workers=0 or a
    negative value both constructors raise the same ValueError; 0 passes the constructor and fails when
    iterating, in both (chute then runs the generic path, which refuses it as torch does)."""
    ds = T.ImageFolder(folder, transform=T.Compose([T.Resize((16, 16)), T.PILToTensor()]))
    loader = chute.DataLoader(ds, batch_size=2, num_workers=2)
    assert loader.prefetch_factor == DataLoader(ds, batch_size=2, num_workers=2).prefetch_factor == 2
    assert loader.stats()["auto_prefetch"] is True
    assert chute.DataLoader(ds, batch_size=2).stats()["auto_prefetch"] is True
    for kwargs in ({"num_workers": 0, "prefetch_factor": 2}, {"num_workers": 2, "prefetch_factor": -1}):
        with pytest.raises(ValueError) as theirs:
            DataLoader(ds, batch_size=2, **kwargs)
        with pytest.raises(ValueError) as ours:
            chute.DataLoader(ds, batch_size=2, **kwargs)
        assert str(ours.value) == str(theirs.value)
    zero = chute.DataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=0)
    stats = zero.stats()
    assert stats["path"] == "generic" and "prefetch_factor=0" in stats["fallback_reason"]
    with pytest.raises(AssertionError):
        iter(DataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=0))
    with pytest.raises(AssertionError):
        iter(zero)


class _Engine:
    """A native loader's stats() as the fast path merges them."""

    def __init__(self, **figures):
        self.figures = figures

    def stats(self):
        return dict(self.figures)

    def close(self):
        pass


def test_merged_stats_of_two_engines_count_the_process_and_the_clock_once():
    """Two batch sizes, two engines in one process: counters add up, but both measured the same seconds
    and the same process's CPU, so elapsed_s and process_cpu_s are not summed (that halved the cores the
    verdict saw busy); settings are the largest, auto only where both are."""
    from chute.dataloader.folder_path import FolderPlan

    common = dict(cores=2, threads=2, active_threads=2, batches=5, wait_s=1.0, consumer_s=1.0)
    plan = object.__new__(FolderPlan)
    keys = ("elapsed_s", "process_cpu_s", "samples", "decode_s", "prefetch", "max_prefetch", "auto_prefetch")
    rows = {4: (10.0, 19.0, 20, 8.0, 2, 9, True), 8: (6.0, 11.0, 40, 9.0, 3, 3, False)}
    plan._loaders = {batch_size: _Engine(**dict(zip(keys, row)), **common) for batch_size, row in rows.items()}
    out = plan.stats()
    assert out["elapsed_s"] == 10.0 and out["process_cpu_s"] == 19.0
    assert out["samples"] == 60 and out["decode_s"] == 17.0 and out["batches"] == 10
    assert out["prefetch"] == 3 and out["max_prefetch"] == 9 and out["auto_prefetch"] is False
    assert out["cores"] == 2 and out["stall_fraction"] == 0.5
