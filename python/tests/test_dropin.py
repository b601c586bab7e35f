"""The drop-in never fails where torch succeeds (issue 18, section 4): kept labels hold no image memory,
kept image batches on the fast path never raise, and every limit an error names can be set from Python."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import chute
from chute import native_folder
from chute.dataloader import fastpath

import tv_standins as T

HERE = Path(__file__).resolve().parent


def keep_labels(root: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "keep_labels_child.py"), str(root), mode],
                         capture_output=True, text=True, timeout=300, cwd=HERE)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["loader", "fastpath"])
def test_kept_labels_of_three_epochs_hold_no_image_memory(folder, mode):
    r = keep_labels(folder, mode)
    labels = [int(p.parent.name.split("_")[1]) for p in sorted(folder.glob("*/*.jpg"))]
    assert r["labels"] == labels * 3  # every label kept, in order, with its value
    # 9 batches' labels were kept: before the fix each pinned its image batch (9 x 21 MB; the Loader with
    # a 6-buffer ring raised ResourceExhausted instead). Flat: epochs 2 and 3 add less than one batch.
    growth = (r["rss_kb"][-1] - r["rss_kb"][0]) * 1024
    assert growth < r["batch_bytes"], f"RSS grew by {growth / 2**20:.0f} MB over epochs 2-3: {r['rss_kb']}"


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


def test_max_ring_bytes_named_in_the_error_is_settable(folder):
    batch_bytes = 4 * (3 * 32 * 32 + 8)
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, num_threads=1, prefetch=1,
                          transforms=[chute.Resize((32, 32))], max_ring_bytes=3 * batch_bytes)
    kept = []
    with pytest.raises(RuntimeError, match="max_ring_bytes"):
        for images, _ in loader:
            kept.append(images)
    assert len(kept) == 3  # the ring's 3 buffers, all held
    kept.clear()
    # A larger budget lets the same consumer keep every batch.
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, num_threads=1, prefetch=1,
                          transforms=[chute.Resize((32, 32))], max_ring_bytes=100 * batch_bytes)
    assert len([images for images, _ in loader]) == 9
    with pytest.raises(ValueError, match="max_ring_bytes"):
        chute.Loader(chute.ImageFolder(folder), max_ring_bytes=0)


def test_fast_path_keeps_every_image_batch_beyond_the_ring_limit(folder, monkeypatch, caplog):
    monkeypatch.setattr(native_folder, "_RING_BYTES", 1)  # the ring keeps only its initial buffers
    dataset = T.ImageFolder(folder, transform=T.Compose([T.Resize((48, 48)), T.PILToTensor()]))
    loader = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    plan = fastpath.plan(loader)
    assert isinstance(plan, fastpath.Plan) and plan.kind == "imagefolder", str(plan)
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
