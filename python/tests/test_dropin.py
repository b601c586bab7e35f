"""The drop-in never fails where torch succeeds (issue 18, section 4): kept labels hold no image memory,
kept image batches on the fast path never raise, and every limit an error names can be set from Python."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import jpeg_bytes, natural_image
from PIL import Image, ImageFile
from torch.utils.data import DataLoader, Subset, TensorDataset

import chute
from chute.bench.pil_reference import as_torchvision
from chute.dataloader import folder_path
from chute.dataloader import plan as seam

T = as_torchvision()

HERE = Path(__file__).resolve().parent


def keep_labels(root: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE / "keep_labels_child.py"), str(root), mode],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["loader", "fastpath"])
def test_kept_labels_of_three_epochs_hold_no_image_memory(folder, mode):
    r = keep_labels(folder, mode)
    labels = [int(p.parent.name.split("_")[1]) for p in sorted(folder.glob("*/*.jpg"))]
    assert r["labels"] == labels * 3  # every label kept, in order, with its value
    # 27 batches' labels were kept: before the fix each pinned its image batch (7 MB each: epochs 2 and 3
    # added 18 batches, 127 MB; the Loader with a 6-buffer ring raised ResourceExhausted instead). Flat:
    # epochs 2 and 3 add less than 6 batches (room for the fast path's auto prefetch to grow a little).
    growth = (r["rss_kb"][-1] - r["rss_kb"][0]) * 1024
    assert growth < 6 * r["batch_bytes"], f"RSS grew by {growth / 2**20:.0f} MB over epochs 2-3: {r['rss_kb']}"


def test_a_kept_labels_tensor_holds_no_batch_buffer(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.Resize((32, 32))])
    native = loader._native  # the engine itself: chute.Loader's generator frame holds its current batch
    native.start_epoch(0)
    images, labels = native.next()
    assert native.ring_usage()[0] == 1  # the image batch holds its buffer
    del images  # the labels alone hold none (before the fix they kept the whole batch buffer)
    assert native.ring_usage()[0] == 0
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 0, 0, 0]
    loader.close()


def test_kept_labels_hold_no_device_batch(folder):
    loader = chute.Loader(
        chute.ImageFolder(folder), batch_size=4, transforms=[chute.Resize((32, 32))], device="sim", device_prefetch=1
    )
    targets = [labels for _, labels in loader]  # before: "held by batches the consumer still references"
    assert torch.cat(targets).tolist() == [0] * 12 + [1] * 12 + [2] * 12
    loader.close()


def test_max_ring_bytes_named_in_the_error_is_settable(folder):
    batch_bytes = 4 * (3 * 32 * 32 + 8)
    loader = chute.Loader(
        chute.ImageFolder(folder),
        batch_size=4,
        num_threads=1,
        prefetch=1,
        transforms=[chute.Resize((32, 32))],
        max_ring_bytes=3 * batch_bytes,
    )
    kept = []
    with pytest.raises(RuntimeError, match="max_ring_bytes"):
        for images, _ in loader:
            kept.append(images)
    assert len(kept) == 3  # the ring's 3 buffers, all held
    kept.clear()
    # A larger budget lets the same consumer keep every batch.
    loader = chute.Loader(
        chute.ImageFolder(folder),
        batch_size=4,
        num_threads=1,
        prefetch=1,
        transforms=[chute.Resize((32, 32))],
        max_ring_bytes=100 * batch_bytes,
    )
    assert len([images for images, _ in loader]) == 9
    with pytest.raises(ValueError, match="max_ring_bytes"):
        chute.Loader(chute.ImageFolder(folder), max_ring_bytes=0)


def test_the_ring_shrinks_back_once_the_consumer_lets_go(folder):
    loader = chute.Loader(
        chute.ImageFolder(folder), batch_size=4, num_threads=1, prefetch=1, transforms=[chute.Resize((32, 32))]
    )
    base = loader.stats()["batch_buffers"]  # prefetch + 2
    kept = [images for images, _ in loader]
    grown = loader.stats()["batch_buffers"]
    assert grown >= len(kept) == 9  # it grew for the kept batches
    del kept
    for images, _ in loader:  # noqa: B007 (images: the last batch, checked below)  the next epoch starts by freeing what nobody holds any more
        assert loader.stats()["batch_buffers"] <= base + 1 < grown
    assert torch.equal(images, images.clone())
    loader.close()


def test_fast_path_ring_shrinks_back_after_kept_batches_are_let_go(folder):
    dataset = T.ImageFolder(folder, transform=T.Compose([T.Resize((32, 32)), T.PILToTensor()]))
    loader = chute.DataLoader(dataset, batch_size=4)
    kept = list(loader)
    (native,) = loader._chute_plan._loaders.values()
    grown = native.stats()["batch_buffers"]
    assert grown >= len(kept) == 9
    del kept
    assert sum(1 for _ in loader) == 9  # an epoch that keeps nothing starts by freeing what nobody holds
    assert native.stats()["batch_buffers"] < grown


def test_fast_path_keeps_every_image_batch_beyond_the_ring_limit(folder, monkeypatch, caplog):
    monkeypatch.setattr(folder_path, "_ring_bytes", lambda options: 1)  # the ring keeps only its initial buffers
    dataset = T.ImageFolder(folder, transform=T.Compose([T.Resize((48, 48)), T.PILToTensor()]))
    loader = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    plan = seam.choose(loader)
    assert isinstance(plan, seam.Plan) and plan.kind == "imagefolder", str(plan)
    kept, copies = [], []
    with caplog.at_level(logging.WARNING, logger="chute.dataloader"):
        for _ in range(2):
            base_seed = torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
            for images, labels in plan.batches(iter(loader._index_sampler), base_seed=base_seed):
                kept.append((images, labels))
                copies.append((images.clone(), labels.clone()))
    plan.close()
    assert len(kept) == 2 * 9
    for (images, labels), (ci, cl) in zip(kept, copies):  # no kept batch was overwritten by a later one
        assert torch.equal(images, ci) and torch.equal(labels, cl)
    said = [r for r in caplog.records if "copied into fresh tensors" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    # And the data is torch's: the same order and labels, pixels within the path's tolerance.
    loader = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    ref = [b for _ in range(2) for b in loader]
    for (images, labels), (ri, rl) in zip(kept, ref):
        assert torch.equal(labels, rl)
        assert (images.int() - ri.int()).abs().float().mean() < 1.0


# ---- Subset, fallback warnings, worker counts -------------------------------------------------------


def test_subset_of_an_image_folder_takes_the_fast_path(folder):
    dataset = T.ImageFolder(folder, transform=T.Compose([T.Resize((40, 40)), T.PILToTensor()]))
    subset = Subset(dataset, [35, 0, 7, 12, 13, 30, 2, 21, 22, 5, 17])
    loader = chute.DataLoader(subset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))
    assert loader.stats()["path"] == "fast:imagefolder", loader.stats()["fallback_reason"]
    fast = [b for _ in range(2) for b in loader]
    ref_loader = DataLoader(subset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))
    ref = [b for _ in range(2) for b in ref_loader]
    assert len(fast) == len(ref) == 6
    for (images, labels), (ri, rl) in zip(fast, ref):
        assert torch.equal(labels, rl)  # the subset's samples, in the sampler's order
        assert images.shape == ri.shape and images.dtype == ri.dtype
        assert (images.int() - ri.int()).abs().float().mean() < 1.0


def test_subset_of_a_tensor_dataset_takes_the_fast_path():
    x, y = torch.arange(60, dtype=torch.float32).reshape(20, 3), torch.arange(20) * 10
    subset = Subset(TensorDataset(x, y), torch.tensor([19, 3, 3, 0, -1, 8, 11]))  # repeats and a negative
    loader = chute.DataLoader(subset, batch_size=3)
    assert loader.stats()["path"] == "fast:tensor", loader.stats()["fallback_reason"]
    fast, ref = list(loader), list(DataLoader(subset, batch_size=3))
    assert len(fast) == len(ref) == 3
    for f, r in zip(fast, ref):
        assert torch.equal(f[0], r[0]) and torch.equal(f[1], r[1])


class Plain(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i])


def test_fallback_is_one_warning_per_dataloader_naming_reason_and_remedy(caplog):
    with caplog.at_level(logging.INFO, logger="chute.dataloader"):
        loader = chute.DataLoader(Subset(Plain(), [1, 2, 3]), batch_size=2)
        list(loader), list(loader)
        chute.DataLoader(Plain(), batch_size=2, collate_fn=lambda b: b).stats()
    records = [r for r in caplog.records if r.name == "chute.dataloader"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]  # one per DataLoader
    first, second = records[0].getMessage(), records[1].getMessage()
    assert "Subset of a dataset without a fast path" in first and "Plain has no native fast path" in first
    assert "To get one:" in first and "chute_columns" in first
    assert "custom collate_fn" in second and "To get one: leave collate_fn unset" in second
    assert loader.stats()["fallback_reason"] in first


def test_fast_path_starts_no_worker_and_says_what_was_asked():
    dataset = TensorDataset(torch.arange(16))
    with warnings.catch_warnings(record=True) as torch_said:  # the reference: torch's DataLoader warns
        warnings.simplefilter("always")
        DataLoader(dataset, batch_size=4, num_workers=512)
    assert any("512 worker processes" in str(w.message) for w in torch_said)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loader = chute.DataLoader(dataset, batch_size=4, num_workers=512)
        batches = list(loader)
    assert not [str(w.message) for w in said if "worker" in str(w.message)]
    assert torch.equal(torch.cat([b[0] for b in batches]), torch.arange(16))
    stats = loader.stats()
    assert stats["path"] == "fast:tensor"
    assert stats["num_workers_requested"] == 512 and stats["num_workers"] == 0


# ---- CenterCrop larger than the image -----------------------------------------------------------------


def test_center_crop_larger_than_the_image_pads_with_zeros_like_torchvision(folder):
    paths = sorted(folder.glob("*/*.jpg"))
    size = (277, 301)  # (h, w): images are 150-330 pixels a side, so some axes pad (odd and even) and some crop
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=6, transforms=[chute.CenterCrop(size)])
    got = torch.cat([images for images, _ in loader])
    padded_axes = 0
    for path, out in zip(paths, got):
        with Image.open(path) as im:
            rgb = im.convert("RGB")
        padded_axes += (rgb.width < size[1]) + (rgb.height < size[0])
        crop = T.CenterCrop(size)  # torchvision's: pads with zeros, (crop - size) // 2 on the left/top
        ref = torch.from_numpy(np.array(crop(rgb))).permute(2, 0, 1)
        zeros = torch.from_numpy(np.asarray(crop(Image.new("L", rgb.size, 255))) == 0)
        assert out.shape == ref.shape
        assert torch.equal(out[:, zeros], ref[:, zeros]) and bool((out[:, zeros] == 0).all()), path
        diff = (out[:, ~zeros].int() - ref[:, ~zeros].int()).abs()
        assert float(diff.float().mean()) < 1.0 and int(diff.max()) <= 8, path
    assert padded_axes >= 20  # the test covers padding (before the fix: SampleError at the first batch)


def test_fast_path_pads_center_crop_after_resize_then_normalises_and_flips_the_zeros(folder):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    transform = T.Compose(
        [T.Resize(60), T.CenterCrop((75, 81)), T.RandomHorizontalFlip(1.0), T.ToTensor(), T.Normalize(mean, std)]
    )
    dataset = T.ImageFolder(folder, transform=transform)
    loader = chute.DataLoader(dataset, batch_size=6)
    assert loader.stats()["path"] == "fast:imagefolder", loader.stats()["fallback_reason"]
    fast, ref = list(loader), list(DataLoader(dataset, batch_size=6))
    assert len(fast) == len(ref) == 6
    for (images, labels), (ri, rl) in zip(fast, ref):
        assert torch.equal(labels, rl) and images.shape == ri.shape == (6, 3, 75, 81)
        pad_value = ((0 - torch.tensor(mean)) / torch.tensor(std)).view(1, 3, 1, 1)
        border = (ri == pad_value).all(dim=1, keepdim=True).expand_as(ri)  # where torchvision padded
        assert border.flatten(1).any(1).all()  # Resize(60) leaves the short side < 75 or 81: every image pads
        assert torch.equal(images[border], ri[border])
        err = ((images - ri) * torch.tensor(std).view(1, 3, 1, 1) * 255).abs()
        assert float(err.mean()) < 1.0 and float(err.max()) <= 8.5


# ---- PIL.ImageFile.LOAD_TRUNCATED_IMAGES --------------------------------------------------------------


@pytest.fixture
def load_truncated(monkeypatch):
    """Sets PIL's flag for the test and restores it after."""
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", ImageFile.LOAD_TRUNCATED_IMAGES)
    return lambda on: setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", on)


def pil_rgb(path) -> np.ndarray:
    with Image.open(path) as im:
        return np.array(im.convert("RGB"))


def truncated_copies(root: Path, subsampling: int, progressive: bool = False) -> tuple[list[Path], list[Path]]:
    """A JPEG cut at many points: inside its header, all along its scan data and, progressive, inside the
    markers between its scans. Returns (the copies PIL decodes with LOAD_TRUNCATED_IMAGES, the copies it
    still refuses), each in a folder of its own."""
    data = jpeg_bytes(
        natural_image(np.random.default_rng(7), 96, 80), quality=90, subsampling=subsampling, progressive=progressive
    )
    cuts = set(range(60, 700, 90)) | {int(len(data) * f) for f in np.linspace(0.15, 0.995, 12)}
    first_scan = data.find(b"\xff\xda")
    cuts |= {first_scan + 5}  # inside the first scan header: PIL refuses (its header reader needs all of it)
    for marker in (b"\xff\xc4", b"\xff\xda"):  # a Huffman table or a scan header after the first scan
        at = data.find(marker, first_scan + 2)
        if at > 0:
            cuts |= {at + 3, at + 6}
    accepted, refused = [], []
    for cut in sorted(cuts):
        path = root / f"s{subsampling}_p{int(progressive)}_{cut:05d}" / "c" / "a.jpg"
        path.parent.mkdir(parents=True)
        path.write_bytes(data[:cut])
        try:
            pil_rgb(path)
            accepted.append(path)
        except OSError:
            refused.append(path)
    return accepted, refused


def first_image(path: Path) -> np.ndarray:
    dataset = T.ImageFolder(path.parent.parent, transform=T.Compose([T.CenterCrop((80, 96)), T.PILToTensor()]))
    loader = chute.DataLoader(dataset, batch_size=1)
    assert loader.stats()["path"] == "fast:imagefolder", loader.stats()["fallback_reason"]
    ((images, _),) = list(loader)
    return images[0].permute(1, 2, 0).numpy()


@pytest.mark.parametrize("subsampling, progressive", [(0, False), (2, False), (0, True), (2, True)])
def test_load_truncated_images_decodes_what_pil_decodes(tmp_path, load_truncated, subsampling, progressive):
    load_truncated(True)
    accepted, refused = truncated_copies(tmp_path, subsampling, progressive)
    assert len(accepted) >= 12 and len(refused) >= 2  # cuts in the scan data, and cuts inside the header
    black = 0
    for path in accepted:  # the same pixels as PIL's: gray fill, and black where PIL's decode never began
        got, ref = first_image(path), pil_rgb(path)
        black += not ref.any()
        if progressive and subsampling:
            # Pillow 13 bundles libjpeg-turbo 3.2, chute links the system's (2.1 on Debian 12): on partial
            # progressive data their smoothing of subsampled chroma differs by a few levels.
            assert np.abs(got.astype(int) - ref.astype(int)).max() <= 12 and (got.any() == ref.any()), path
        else:
            assert np.array_equal(got, ref), path
    assert black >= 1 if progressive else black == 0  # a cut inside a marker between scans
    for path in refused:  # and raises where PIL raises
        with pytest.raises(chute.SampleError):
            first_image(path)


def test_load_truncated_images_is_read_when_each_epoch_starts(tmp_path, load_truncated):
    load_truncated(True)
    accepted, _ = truncated_copies(tmp_path, 2)
    path = accepted[len(accepted) // 2]
    dataset = T.ImageFolder(path.parent.parent, transform=T.Compose([T.CenterCrop((80, 96)), T.PILToTensor()]))
    loader = chute.DataLoader(dataset, batch_size=1)
    load_truncated(False)
    with pytest.raises(chute.SampleError, match="Premature end"):
        list(loader)  # as PIL: "image file is truncated"
    with pytest.raises(OSError, match="truncated"):
        pil_rgb(path)
    load_truncated(True)  # set between epochs, as a user does after the first error
    ((images, _),) = list(loader)
    assert np.array_equal(images[0].permute(1, 2, 0).numpy(), pil_rgb(path))
    assert loader.stats()["path"] == "fast:imagefolder"


def test_fast_path_decompression_bomb_limit_is_pils_max_image_pixels(folder, monkeypatch):
    dataset = T.ImageFolder(folder, transform=T.Compose([T.Resize((32, 32)), T.PILToTensor()]))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)  # images here have 30-80 thousand pixels
    with pytest.raises(Image.DecompressionBombError):  # torch's DataLoader, through PIL
        next(iter(DataLoader(dataset, batch_size=4)))
    loader = chute.DataLoader(dataset, batch_size=4)
    with pytest.raises(chute.SampleError, match="PIL.Image.MAX_IMAGE_PIXELS"):
        next(iter(loader))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # the user lifts it, between epochs
    assert sum(len(labels) for _, labels in loader) == 36
    assert loader.stats()["path"] == "fast:imagefolder"


def test_load_truncated_images_with_png_files_runs_torchs_path_and_loads_them(tmp_path, load_truncated):
    # chute loads truncated JPEGs as PIL does under the flag, not truncated PNGs: such a dataset falls back,
    # so the drop-in loads what torch's DataLoader loads instead of failing mid-epoch.
    buf = io.BytesIO()
    natural_image(np.random.default_rng(3), 64, 48).save(buf, format="PNG")
    data = buf.getvalue()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "whole.png").write_bytes(data)
    (tmp_path / "a" / "cut.png").write_bytes(data[: len(data) * 2 // 3])
    dataset = T.ImageFolder(tmp_path, transform=T.Compose([T.CenterCrop((40, 40)), T.PILToTensor()]))
    load_truncated(True)
    expected = list(DataLoader(dataset, batch_size=2))  # PIL loads the cut file under the flag
    got = list(chute.DataLoader(dataset, batch_size=2))
    assert len(got) == len(expected) == 1
    assert torch.equal(got[0][0], expected[0][0]) and torch.equal(got[0][1], expected[0][1])
    plan = seam.choose(chute.DataLoader(dataset, batch_size=2))
    assert isinstance(plan, seam.Fallback) and "LOAD_TRUNCATED_IMAGES" in str(plan) and "cut.png" in str(plan)
    load_truncated(False)
    assert isinstance(seam.choose(chute.DataLoader(dataset, batch_size=2)), seam.Plan)
