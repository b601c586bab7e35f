"""chute's own datasets with torchvision's transform=: map datasets that return torchvision's samples (so
torch's DataLoader reads them) and that chute.DataLoader runs natively from their source (the "chute" fast
path): pack once, keep the DataLoader code.

torchvision stands in as chute.bench.pil_reference where it does not import (the real one in .venv-tv)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile
from torch.utils.data import DataLoader, default_collate

import chute
from chute.bench import mix_reference
from chute.bench.pil_reference import as_torchvision, real_torchvision

T = real_torchvision() or as_torchvision()
V2 = mix_reference.real_torchvision() or mix_reference.as_torchvision()
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])
TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def packed(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed") / "train"
    chute.pack(folder, out)
    return out


@pytest.fixture(scope="module")
def raw_packed(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("raw") / "train"
    chute.pack(folder, out, raw=True)
    return out


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb)
        assert xa.dtype == xb.dtype and xa.shape == xb.shape and xa.stride() == xb.stride()
        assert torch.equal(xa, xb)


def test_image_folder_items_are_torchvisions(folder):
    ours = chute.ImageFolder(folder, transform=EVAL, target_transform=lambda y: y + 10)
    theirs = T.ImageFolder(folder, transform=EVAL, target_transform=lambda y: y + 10)
    assert len(ours) == len(theirs) == 36
    for i in (0, 7, 35, -1):
        (x, y), (rx, ry) = ours[i], theirs[i]
        assert torch.equal(x, rx) and y == ry
    image, label = chute.ImageFolder(folder)[3]  # no transform: the PIL image, as torchvision gives it
    assert isinstance(image, Image.Image) and image.mode == "RGB" and label == theirs[3][1] - 10


@pytest.mark.parametrize("which", ["folder", "packed", "raw"])
def test_torchs_dataloader_reads_them_and_chutes_takes_the_fast_path(folder, packed, raw_packed, which):
    dataset = {
        "folder": lambda: chute.ImageFolder(folder, transform=EVAL),
        "packed": lambda: chute.open(packed, transform=EVAL),
        "raw": lambda: chute.open(raw_packed, transform=EVAL),
    }[which]()
    torchs = list(DataLoader(dataset, batch_size=8, num_workers=2))  # forked workers, torchvision's samples
    fast = chute.DataLoader(dataset, batch_size=8, num_workers=2)
    assert fast.stats()["path"] == "fast:chute", fast.stats()["fallback_reason"]
    assert_batches_equal(list(fast), torchs)  # PIL geometry: bit-exact, from the packed records too
    reference = list(DataLoader(T.ImageFolder(folder, transform=EVAL), batch_size=8))
    assert_batches_equal(torchs, reference)  # and the same as torchvision over the original files


def small_tensor(image):
    """A picklable transform (a module-level function): spawned workers get the dataset pickled."""
    return torch.from_numpy(np.array(image.resize((16, 12)))).permute(2, 0, 1)


@pytest.mark.parametrize("which", ["folder", "packed"])
def test_they_pickle_for_spawned_workers(folder, packed, which):
    dataset = chute.ImageFolder(folder) if which == "folder" else chute.open(packed)
    dataset.transform, dataset.target_transform = small_tensor, str
    copy = pickle.loads(pickle.dumps(dataset))
    assert type(copy) is type(dataset) and len(copy) == 36 and copy.transform is small_tensor
    spawned = list(DataLoader(dataset, batch_size=9, num_workers=1, multiprocessing_context="spawn"))
    in_process = list(DataLoader(dataset, batch_size=9))
    assert [y for _, y in spawned] == [y for _, y in in_process]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(spawned, in_process))


def test_records_without_transforms_stay_bytes(packed):
    dataset = chute.open(packed)
    data, label = dataset[0]
    assert isinstance(data, bytes) and data[:2] == b"\xff\xd8" and isinstance(label, int)
    loader = chute.DataLoader(dataset, batch_size=4)
    assert "returns each record's encoded bytes" in loader.stats()["fallback_reason"]


def test_train_pipeline_is_reproducible_and_shaped_like_torchvisions(packed):
    dataset = chute.open(packed, transform=TRAIN)

    def epoch(seed):
        return list(
            chute.DataLoader(dataset, batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(seed))
        )

    a, b = epoch(1), epoch(1)
    assert_batches_equal(a, b)
    ref = next(iter(DataLoader(dataset, batch_size=6)))
    assert a[0][0].dtype == ref[0].dtype and a[0][0].shape == ref[0].shape
    assert sorted(torch.cat([y for _, y in a]).tolist()) == sorted(dataset.targets)


def test_mixup_cutmix_collate_over_a_chute_dataset(folder):
    mix = V2.RandomChoice([V2.MixUp(alpha=0.2, num_classes=3), V2.CutMix(alpha=1.0, num_classes=3)])
    loader = chute.DataLoader(
        chute.ImageFolder(folder, transform=TRAIN), batch_size=6, collate_fn=lambda b: mix(*default_collate(b))
    )
    assert loader.stats()["path"] == "fast:chute"
    images, soft = next(iter(loader))
    assert images.shape == (6, 3, 32, 32) and soft.shape == (6, 3) and soft.dtype == torch.float32


def test_what_falls_back_says_why(folder, packed, monkeypatch):
    cases = [
        (chute.ImageFolder(folder, transform=EVAL, target_transform=lambda y: y), "target_transform"),
        (chute.ImageFolder(folder), "transform is None"),
        (chute.open(packed, transform=T.Compose([T.ToTensor()])), "native"),
    ]
    for dataset, reason in cases:
        loader = chute.DataLoader(dataset, batch_size=4)
        assert loader.stats()["path"] == "generic"
        assert reason in loader.stats()["fallback_reason"], loader.stats()["fallback_reason"]
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    loader = chute.DataLoader(chute.open(packed, transform=EVAL), batch_size=4)
    assert "LOAD_TRUNCATED_IMAGES" in loader.stats()["fallback_reason"]
    assert chute.DataLoader(chute.ImageFolder(folder, transform=EVAL), batch_size=4).stats()["path"] == "fast:chute"


def test_a_new_transform_between_epochs_is_followed(folder):
    dataset = chute.ImageFolder(folder, transform=EVAL)
    loader = chute.DataLoader(dataset, batch_size=12)
    assert next(iter(loader))[0].shape[-1] == 32
    dataset.transform = T.Compose([T.Resize(30), T.CenterCrop(24), T.ToTensor()])  # progressive resizing
    images, _ = next(iter(loader))
    assert images.shape[-1] == 24 and loader.stats()["path"] == "fast:chute"
    assert torch.equal(images, next(iter(DataLoader(dataset, batch_size=12)))[0])
