"""WebDataset tars whose samples are labelled by their own number, so that a batch's labels say which samples
(and which shards) it holds: shared by test_shard_order.py, test_elastic.py and elastic_child.py."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image


def jpeg(i: int) -> bytes:
    rgb = np.full((16, 16, 3), (i * 37 % 256, i * 11 % 256, i // 256 * 40 % 256), np.uint8)
    rgb[i % 16, :, :] = 255  # each sample's pixels differ
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="JPEG", quality=95)
    return out.getvalue()


def write_tars(out: Path, sizes: list[int]) -> list[str]:
    """WebDataset tars: tar t holds sizes[t] samples, labelled by their number across all tars."""
    out.mkdir(parents=True, exist_ok=True)
    paths, sample = [], 0
    for t, size in enumerate(sizes):
        path = out / f"train-{t:04d}.tar"
        with tarfile.open(path, "w") as tar:
            members = [("meta.json", b"{}")] if size == 0 else []  # an empty tar: no image, no sample
            for _ in range(size):
                members += [(f"s{sample:06d}.jpg", jpeg(sample)), (f"s{sample:06d}.cls", str(sample).encode())]
                sample += 1
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        paths.append(str(path))
    return paths
