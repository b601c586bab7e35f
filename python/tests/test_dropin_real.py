"""Issue 18 section 4 against the real torchvision (0.29.1 with torch 2.14.1 and Pillow 13): CenterCrop
padding (v1 and v2), Subset, LOAD_TRUNCATED_IMAGES and the worker-count warning, each compared with
torch's DataLoader over the same dataset object. Skipped where torchvision does not import (the main venv);
scripts/test_torchvision.sh runs it. test_dropin.py tests the same against the stand-ins."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import ImageFile
from torch.utils.data import DataLoader, Subset

import chute

try:
    from torchvision import datasets
    from torchvision import transforms as T1
    from torchvision.transforms import v2
except (ImportError, OSError, RuntimeError) as e:  # torchvision's build must match torch's
    pytest.skip(
        f"torchvision does not import here ({type(e).__name__}); scripts/test_torchvision.sh runs this",
        allow_module_level=True,
    )

from conftest import jpeg_bytes, natural_image  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def fast_and_torch(dataset, **kwargs):
    loader = chute.DataLoader(dataset, **kwargs)
    assert loader.stats()["path"] == "fast:imagefolder", loader.stats()["fallback_reason"]
    return list(loader), list(DataLoader(dataset, **kwargs))


def assert_same(fast, ref):
    assert len(fast) == len(ref)
    for (images, labels), (ri, rl) in zip(fast, ref):
        assert torch.equal(labels, rl)
        assert images.dtype == ri.dtype and images.shape == ri.shape and images.stride() == ri.stride()
        assert torch.equal(images, ri)  # PIL geometry: chute is bit-exact, padding included


@pytest.mark.parametrize(
    "transform",
    [
        T1.Compose([T1.CenterCrop(300), T1.PILToTensor()]),
        T1.Compose(
            [
                T1.Resize(60),
                T1.CenterCrop((75, 81)),
                T1.RandomHorizontalFlip(1.0),
                T1.ToTensor(),
                T1.Normalize(MEAN, STD),
            ]
        ),
        v2.Compose([v2.CenterCrop(300), v2.PILToTensor()]),
    ],
    ids=["v1-pad", "v1-resize-pad-flip-normalize", "v2-pad"],
)
def test_center_crop_larger_than_the_image_pads_like_torchvision(folder, transform):
    fast, ref = fast_and_torch(datasets.ImageFolder(folder, transform=transform), batch_size=6)
    assert_same(fast, ref)


def test_subset_takes_the_fast_path_without_torchs_worker_warning(folder):
    dataset = datasets.ImageFolder(folder, transform=T1.Compose([T1.Resize((40, 40)), T1.PILToTensor()]))
    subset = Subset(dataset, [35, 0, 7, 12, 13, 30, 2])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loader = chute.DataLoader(subset, batch_size=3, num_workers=64)
        fast = list(loader)
    assert not [str(w.message) for w in said if "worker" in str(w.message)]
    stats = loader.stats()
    assert stats["path"] == "fast:imagefolder" and stats["num_workers_requested"] == 64 and stats["num_workers"] == 0
    assert_same(fast, list(DataLoader(subset, batch_size=3)))


def test_load_truncated_images_as_torchvision_loads_them(tmp_path, monkeypatch):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    for progressive in (False, True):
        data = jpeg_bytes(
            natural_image(np.random.default_rng(3), 96, 80), quality=90, subsampling=0, progressive=progressive
        )
        d = tmp_path / f"p{int(progressive)}" / "c"
        d.mkdir(parents=True)
        for i, frac in enumerate((0.3, 0.5, 0.8, 0.97)):
            (d / f"{i}.jpg").write_bytes(data[: int(len(data) * frac)])
        dataset = datasets.ImageFolder(d.parent, transform=T1.Compose([T1.CenterCrop((80, 96)), T1.PILToTensor()]))
        assert_same(*fast_and_torch(dataset, batch_size=4))


def _reference_mixup_cutmix(num_classes):
    """references/classification/transforms.py's get_mixup_cutmix(mixup_alpha=0.2, cutmix_alpha=1.0,
    use_v2=True), as train.py builds it."""
    return v2.RandomChoice(
        [v2.MixUp(alpha=0.2, num_classes=num_classes), v2.CutMix(alpha=1.0, num_classes=num_classes)]
    )


def test_reference_train_py_mixup_cutmix_collate_takes_the_fast_path(folder):
    """torchvision's reference train.py: ImageFolder with the v1 training transforms, and its collate_fn
    `def collate_fn(batch): return mixup_cutmix(*default_collate(batch))` in a closure. chute runs it natively;
    each batch is torchvision's own MixUp / CutMix applied with the engine's draws to the unmixed batch."""
    from torch.utils.data.dataloader import default_collate

    ds = datasets.ImageFolder(
        folder,
        T1.Compose([T1.RandomResizedCrop(48), T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)]),
    )
    mixup_cutmix = _reference_mixup_cutmix(len(ds.classes))

    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))

    def loader(collate):
        generator = torch.Generator().manual_seed(9)
        return chute.DataLoader(ds, batch_size=8, shuffle=True, collate_fn=collate, generator=generator)

    mixed_loader = loader(collate_fn)
    assert mixed_loader.stats()["path"] == "fast:imagefolder", mixed_loader.stats()["fallback_reason"]
    mixed, plain = list(mixed_loader), list(loader(default_collate))
    base_seed = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(9)).item()
    native, end, kinds = mixed_loader._plan()._batch_transform.native, 0, set()
    for (images, soft), (unmixed, labels) in zip(mixed, plain):
        end += len(labels)
        kind, lam, label_lam, box = chute._native.draw_batch_mix(native, base_seed & (2**64 - 1), 0, end, 48, 48)
        kinds.add(kind)
        t = mixup_cutmix.transforms[0 if kind == "mixup" else 1]
        params = {"labels": labels, "batch_size": len(labels)}
        params |= {"lam": lam} if kind == "mixup" else {"box": box, "lam_adjusted": label_lam}
        assert torch.equal(images, t.transform(unmixed, params))  # torchvision's arithmetic, bit for bit
        assert torch.equal(soft, t.transform(labels, params))
        assert soft.dtype == torch.float32 and soft.shape == (len(labels), len(ds.classes))
    assert kinds == {"mixup", "cutmix"}
    # torch's DataLoader with the same collate_fn: the same structure (its own draws).
    ref = next(iter(DataLoader(ds, batch_size=8, shuffle=True, collate_fn=collate_fn)))
    assert type(ref) is type(mixed[0]) is tuple
    assert [(x.dtype, x.shape) for x in ref] == [(x.dtype, x.shape) for x in mixed[0]]
