"""What the remote-dataset tests share (test_remote.py, test_remote_stream.py): small WebDataset tars whose
labels are their samples' numbers, a loader over them, and the comparison of two runs' batches."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import torch
from shard_tars import jpeg

import chute


def write_tars(directory: Path, samples: int, per_tar: int, filler: int = 0) -> list[Path]:
    """directory/train-%04d.tar, WebDataset style: %06d.jpg, %06d.cls (label = the sample's number) and, with
    `filler` > 0, a %06d.bin member of that many bytes (which no sample reads: it makes the tars large)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in range((samples + per_tar - 1) // per_tar):
        paths.append(directory / f"train-{t:04d}.tar")
        with tarfile.open(paths[-1], "w") as tar:
            for i in range(t * per_tar, min(samples, (t + 1) * per_tar)):
                members = [(f"{i:06d}.jpg", jpeg(i)), (f"{i:06d}.cls", str(i).encode())]
                if filler:
                    members.append((f"{i:06d}.bin", bytes([i % 251]) * filler))
                for name, blob in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
    return paths


def make(source, **kw) -> chute.Loader:
    opts = dict(batch_size=16, shuffle=True, seed=7, transforms=[chute.CenterCrop(16)], num_threads=2)
    opts.update(kw)
    return chute.Loader(source, **opts)


def run(loader, epochs=(0,)) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out += [(x.clone(), y.clone()) for x, y in loader]
    return out


def assert_same(got, want):
    assert len(got) == len(want)
    for b, ((x, y), (wx, wy)) in enumerate(zip(got, want)):
        assert torch.equal(y, wy), f"batch {b}: labels differ"
        assert torch.equal(x, wx), f"batch {b}: pixels differ"


def labels(batches) -> list[int]:
    return [int(v) for _, y in batches for v in y]
