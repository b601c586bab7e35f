"""Tests of the benchmark dataset generator, the DataLoader peer, and the PIL reference for torchvision."""

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from chute.bench import dataset, pil_reference, torch_peer
from chute.bench.pil_reference import CenterCrop, RandomResizedCrop, Resize, ToTensor

W, H = 500, 375


def coordinate_image(width, height):
    """Return a 32-bit image whose pixel (x, y) holds ``1000 * y + x``."""
    ys, xs = np.mgrid[0:height, 0:width]
    return Image.fromarray((1000 * ys + xs).astype(np.int32))


def test_get_params_windows_inside_image_and_in_range():
    img = Image.new("RGB", (W, H))
    torch.manual_seed(1)
    for _ in range(500):
        i, j, h, w = RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3))
        assert 0 <= i and i + h <= H and 0 <= j and j + w <= W
        assert 0.08 * W * H * 0.98 <= w * h <= W * H
        assert 3 / 4 * 0.98 <= w / h <= 4 / 3 * 1.02


def test_get_params_matches_torchvision_stream():
    # Values from torchvision 0.29 RandomResizedCrop.get_params after torch.manual_seed(0).
    img = Image.new("RGB", (W, H))
    torch.manual_seed(0)
    params = [RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(3)]
    assert params == [(17, 80, 294, 343), (52, 183, 251, 271), (26, 182, 295, 318)]


@pytest.mark.parametrize(
    "scale, ratio, expected",
    [
        ((0.9, 1.0), (5.0, 6.0), ((H - 100) // 2, 0, 100, W)),
        ((0.9, 1.0), (0.1, 0.2), (0, (W - 75) // 2, H, 75)),
        ((2.0, 2.0), (1.0, 1.5), (0, 0, H, W)),
    ],
)
def test_get_params_fallback_centre_crop(scale, ratio, expected):
    img = Image.new("RGB", (W, H))
    torch.manual_seed(0)
    assert RandomResizedCrop.get_params(img, scale, ratio) == expected


def test_get_params_reproducible_with_manual_seed():
    img = Image.new("RGB", (W, H))
    draws = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        draws.append([RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(20)])
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]


def test_random_resized_crop_resamples_window():
    img = coordinate_image(W, H).convert("RGB")
    torch.manual_seed(0)
    out = RandomResizedCrop(224)(img)
    assert out.size == (224, 224)
    torch.manual_seed(0)
    i, j, h, w = RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3))
    expected = img.crop((j, i, j + w, i + h)).resize((224, 224), Image.Resampling.BILINEAR)
    assert np.array_equal(np.asarray(out), np.asarray(expected))


def test_horizontal_flip_follows_torch_rng():
    img = coordinate_image(4, 2)
    flip = pil_reference.RandomHorizontalFlip()
    torch.manual_seed(0)  # torch.rand(1) < 0.5 gives True, False after this seed.
    flipped, kept = flip(img), flip(img)
    assert np.array_equal(np.asarray(flipped), np.asarray(img)[:, ::-1])
    assert kept is img


@pytest.mark.parametrize(
    "size, expected",
    [
        ((500, 375), (341, 256)),
        ((375, 500), (256, 341)),
        ((300, 300), (256, 256)),
        ((1000, 257), (996, 256)),
        ((100, 50), (512, 256)),
    ],
)
def test_resize_shorter_side_rule(size, expected):
    assert Resize(256)(Image.new("RGB", size)).size == expected


def test_resize_keeps_image_already_at_size():
    img = Image.new("RGB", (300, 256))
    assert Resize(256)(img) is img


@pytest.mark.parametrize(
    "width, height, top, left",
    [
        (341, 256, 16, 58),  # round(58.5) is 58: Python rounds halves to even
        (256, 341, 58, 16),
        (227, 229, 2, 2),  # round(1.5) and round(2.5) are both 2
        (224, 224, 0, 0),
    ],
)
def test_center_crop_offsets(width, height, top, left):
    out = np.asarray(CenterCrop(224)(coordinate_image(width, height)))
    assert out.shape == (224, 224)
    assert out[0, 0] == 1000 * top + left
    assert out[-1, -1] == 1000 * (top + 223) + left + 223


def test_center_crop_pads_small_image():
    img = Image.new("RGB", (200, 100), (255, 255, 255))
    out = np.asarray(CenterCrop(224)(img))
    assert out.shape == (224, 224, 3)
    rows = np.flatnonzero(out[:, :, 0].any(axis=1))
    cols = np.flatnonzero(out[:, :, 0].any(axis=0))
    assert (rows[0], rows[-1], cols[0], cols[-1]) == (62, 161, 12, 211)


def test_to_tensor_layout_and_scale():
    pixels = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    tensor = ToTensor()(Image.fromarray(pixels))
    assert tensor.shape == (3, 5, 7) and tensor.dtype == torch.float32
    assert torch.equal(tensor, torch.from_numpy(pixels).permute(2, 0, 1).float() / 255)


@pytest.mark.parametrize("make", [torch_peer.make_train_transform, torch_peer.make_eval_transform])
def test_transform_output(make):
    pixels = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    pixels[:10] = 0
    pixels[-10:] = 255
    torch.manual_seed(0)
    out = make()(Image.fromarray(pixels))
    assert out.shape == (3, 224, 224) and out.dtype == torch.float32
    mean = torch.tensor(torch_peer.IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(torch_peer.IMAGENET_STD).view(3, 1, 1)
    assert torch.all(out >= (0 - mean) / std - 1e-5)
    assert torch.all(out <= (1 - mean) / std + 1e-5)
    assert out.std() > 0.5


def make_tree(root, files):
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".txt"):
            path.write_text("not an image")
        else:
            Image.new("L", (3, 2), 128).save(path, format="PNG")


def test_pil_image_folder_listing(tmp_path):
    make_tree(
        tmp_path,
        [
            "dog/b.JPG",
            "dog/sub/a.png",
            "dog/sub/z/c.jpeg",
            "dog/notes.txt",
            "dog/x.jpg.bak",
            "cat/2.jpg",
            "cat/10.Jpg",
            "Zebra/deep/er/k.webp",
            "Zebra/a.BMP",
            "stray.jpg",
        ],
    )
    folder = pil_reference.ImageFolder(tmp_path)
    assert folder.classes == ["Zebra", "cat", "dog"]
    assert folder.class_to_idx == {"Zebra": 0, "cat": 1, "dog": 2}
    relative = [(os.path.relpath(path, tmp_path), target) for path, target in folder.samples]
    assert relative == [
        ("Zebra/a.BMP", 0),
        ("Zebra/deep/er/k.webp", 0),
        ("cat/10.Jpg", 1),
        ("cat/2.jpg", 1),
        ("dog/b.JPG", 2),
        ("dog/sub/a.png", 2),
        ("dog/sub/z/c.jpeg", 2),
    ]
    assert folder.targets == [0, 0, 1, 1, 2, 2, 2]
    img, target = folder[3]
    assert img.mode == "RGB" and img.size == (3, 2) and target == 1


def test_pil_image_folder_rejects_empty_class(tmp_path):
    make_tree(tmp_path, ["a/1.jpg", "b/readme.txt"])
    with pytest.raises(FileNotFoundError, match="b"):
        pil_reference.ImageFolder(tmp_path)


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    parent = tmp_path_factory.mktemp("cache")
    root = dataset.ensure_dataset(parent / "ds", num_images=12, num_classes=3, seed=0, progress=False)
    return parent, root


def test_ensure_dataset_layout(tiny_dataset):
    parent, root = tiny_dataset
    assert root == parent / "ds"
    assert sorted(p.name for p in parent.iterdir()) == ["ds"]
    assert sorted(p.name for p in root.iterdir()) == ["COMPLETE", "class_00", "class_01", "class_02"]
    assert sorted(p.name for p in (root / "class_01").iterdir()) == [
        "img_00001.jpg",
        "img_00004.jpg",
        "img_00007.jpg",
        "img_00010.jpg",
    ]
    manifest = json.loads((root / "COMPLETE").read_text())
    assert manifest == {"version": dataset.VERSION, "count": 12, "classes": 3, "seed": 0}
    for path in root.glob("class_*/*.jpg"):
        with Image.open(path) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            long, short = max(img.size), min(img.size)
            assert 480 <= long <= 520 and 360 <= short <= 390
        assert 75_000 <= path.stat().st_size <= 140_000


def test_ensure_dataset_is_idempotent(tiny_dataset):
    parent, root = tiny_dataset
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    assert dataset.ensure_dataset(root, num_images=12, num_classes=3, seed=0, progress=False) == root
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    assert sorted(p.name for p in parent.iterdir()) == ["ds"]


def test_ensure_dataset_refuses_different_dataset(tiny_dataset):
    _, root = tiny_dataset
    with pytest.raises(FileExistsError):
        dataset.ensure_dataset(root, num_images=13, num_classes=3, seed=0, progress=False)


def test_ensure_dataset_is_deterministic(tiny_dataset, tmp_path):
    _, root = tiny_dataset
    other = dataset.ensure_dataset(tmp_path / "again", num_images=3, num_classes=3, seed=0, progress=False)
    for name in ("class_00/img_00000.jpg", "class_02/img_00002.jpg"):
        assert (other / name).read_bytes() == (root / name).read_bytes()


def test_ensure_dataset_interrupted_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(tmp, tasks, progress):
        tasks[0][0].write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(dataset, "_generate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dataset.ensure_dataset(tmp_path / "ds", num_images=4, num_classes=2, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_generate_image_is_photo_like_and_sized():
    rng = np.random.default_rng(3)
    img = dataset.generate_image(rng, 320, 240)
    assert img.mode == "RGB" and img.size == (320, 240)
    pixels = np.asarray(img, dtype=np.float64)
    assert pixels.std() > 20
    # Neighbouring pixels correlate, as in photos, but are not flat.
    dx = np.abs(np.diff(pixels, axis=1)).mean()
    assert 2 < dx < pixels.std()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert dataset.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("CHUTE_CACHE_DIR")
    assert dataset.default_cache_dir() == tmp_path / "x" / "chute"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert dataset.default_cache_dir() == tmp_path / ".cache" / "chute"


def test_make_dataloader_delivers_the_epoch(tiny_dataset):
    _, root = tiny_dataset
    loader = torch_peer.make_dataloader(root, batch_size=4, num_workers=0)
    labels = torch.cat([y for _, y in loader])
    assert sorted(labels.tolist()) == sorted(torch_peer.make_peer_dataset(root).targets)
    x, _ = next(iter(loader))
    assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32


def test_center_crop_pads_each_side_like_torchvision():
    """(crop - image) // 2 zeros on the left/top, the rest right/bottom; a dimension large enough is cropped."""
    img = coordinate_image(7, 20).convert("RGB")
    out = np.asarray(CenterCrop((10, 10))(img))
    assert out.shape == (10, 10, 3)
    assert not out[:, :1].any() and not out[:, 8:].any()  # 3 columns of padding: 1 left, 2 right
    top = int(round((20 - 10) / 2))
    assert np.array_equal(out[:, 1:8], np.asarray(img)[top : top + 10])


@pytest.mark.parametrize(
    "size, max_size, expected",
    [(256, None, (341, 256)), (256, 300, (300, 225)), ([256], 400, (341, 256)), ((100, 60), None, (60, 100))],
)
def test_resize_output_size_follows_torchvision(size, max_size, expected):
    assert Resize(size, max_size=max_size)(Image.new("RGB", (500, 375))).size == expected


def test_resize_rejects_what_torchvision_rejects():
    with pytest.raises(ValueError, match="max_size"):
        Resize(256, max_size=256)(Image.new("RGB", (500, 375)))
    with pytest.raises(ValueError, match="max_size should only be passed"):
        Resize((10, 10), max_size=20)
    with pytest.raises(ValueError, match="1 or 2 values"):
        Resize((1, 2, 3))


def test_color_jitter_brightness_draws_like_torchvision():
    from PIL import ImageEnhance

    img = coordinate_image(6, 4).convert("RGB")
    torch.manual_seed(3)
    out = pil_reference.ColorJitter(0.4)(img)
    torch.manual_seed(3)
    torch.randperm(4)
    factor = float(torch.empty(1).uniform_(0.6, 1.4))
    assert np.array_equal(np.asarray(out), np.asarray(ImageEnhance.Brightness(img).enhance(factor)))
    assert pil_reference.ColorJitter()(img) is img
    with pytest.raises(NotImplementedError, match="brightness only"):
        pil_reference.ColorJitter(contrast=0.2)


def test_image_folder_allow_empty_and_argument_rules(tmp_path):
    make_tree(tmp_path, ["a/1.jpg", "b/readme.txt"])
    folder = pil_reference.ImageFolder(tmp_path, allow_empty=True)
    assert folder.classes == ["a", "b"] and folder.targets == [0]
    with pytest.raises(FileNotFoundError, match="class folder"):
        pil_reference.ImageFolder(tmp_path / "a")
    with pytest.raises(ValueError, match="Both extensions and is_valid_file"):
        pil_reference.DatasetFolder(tmp_path, pil_reference.pil_loader)


def test_as_torchvision_is_what_the_fast_path_recognises_and_the_plain_reference_is_not(tmp_path):
    """The reference's own classes keep their module (they pickle, and are never taken for torchvision);
    as_torchvision() presents the same classes under torchvision's modules, which chute.DataLoader takes."""
    import pickle

    import chute

    make_tree(tmp_path, ["a/1.png", "a/2.png", "b/3.png"])
    T = pil_reference.as_torchvision()
    assert T is pil_reference.as_torchvision()
    assert T.Resize.__module__ == "torchvision.transforms.transforms" and T.Resize.__name__ == "Resize"
    assert issubclass(T.Resize, pil_reference.Resize)
    assert (T.ImageFolder.__module__, T.DatasetFolder.__module__) == ("torchvision.datasets.folder",) * 2
    assert (
        T.default_loader.__module__ == "torchvision.datasets.folder" and T.default_loader.__name__ == "default_loader"
    )
    tv = T.ImageFolder(tmp_path, transform=T.Compose([T.CenterCrop(2), T.PILToTensor()]))
    assert tv.loader is T.default_loader
    assert chute.DataLoader(tv, batch_size=3).stats()["path"] == "fast:imagefolder"
    plain = pil_reference.ImageFolder(
        tmp_path, transform=pil_reference.Compose([pil_reference.CenterCrop(2), pil_reference.PILToTensor()])
    )
    assert chute.DataLoader(plain, batch_size=3).stats()["path"] == "generic"
    again = pickle.loads(pickle.dumps(plain))
    assert again.samples == plain.samples and torch.equal(again[0][0], plain[0][0])
    x, y = next(iter(chute.DataLoader(tv, batch_size=3)))
    assert torch.equal(x, torch.stack([plain[i][0] for i in range(3)])) and y.tolist() == [0, 0, 1]
