"""Shared fixtures: small ImageFolder trees of real JPEGs made with Pillow."""

from __future__ import annotations

import gc
import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

# No test asks the real instance metadata service (169.254.169.254, off loopback): an s3:// store with no
# credentials would, at its first request (botocore's chain too). Tests of that source point
# AWS_EC2_METADATA_SERVICE_ENDPOINT at a loopback stand-in and clear this.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


def natural_image(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Smooth colour fields, an edge and mild noise: enough structure for resampling to matter."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for c in range(3):
        fx, fy, phase = rng.uniform(1, 8), rng.uniform(1, 8), rng.uniform(0, 6.28)
        v = 128 + 90 * np.sin(fx * x / width * 6.28 + phase + c) * np.cos(fy * y / height * 6.28 - c)
        channels.append(v)
    img = np.stack(channels, axis=-1)
    cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(10, min(width, height) / 2)
    inside = (x - cx) ** 2 + (y - cy) ** 2 < r * r
    img[inside] = 255 - img[inside] * 0.7
    img += rng.normal(0, 6, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def chute_threads() -> list[str]:
    """Names of this process's native chute threads (all are named ``chute*``), the main thread aside."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == os.getpid():
            continue  # the main thread is named after the program
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # the thread ended meanwhile
        if comm.startswith("chute"):
            names.append(comm)
    return names


def jpeg_bytes(img: Image.Image, quality: int = 92, subsampling: int = 0, progressive: bool = False) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, subsampling=subsampling, progressive=progressive)
    return buf.getvalue()


def make_folder(root: Path, classes: int, per_class: int, seed: int = 0) -> Path:
    """Varied sizes (landscape and portrait), 4:4:4 / 4:2:2 / 4:2:0, one grayscale and one progressive file."""
    rng = np.random.default_rng(seed)
    k = 0
    for c in range(classes):
        d = root / f"class_{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            w, h = (int(rng.integers(200, 330)), int(rng.integers(150, 260)))
            if k % 4 == 3:
                w, h = h, w
            img = natural_image(rng, w, h)
            if k % 11 == 5:
                img = img.convert("L")
            data = jpeg_bytes(img, quality=int(rng.integers(88, 97)), subsampling=k % 3, progressive=k % 7 == 2)
            (d / f"img_{i:03d}.jpg").write_bytes(data)
            k += 1
    return root


@pytest.fixture(autouse=True)
def _drop_process_object_store():
    """After a test that opened remote data, the process's object store (and its chute-http thread) goes.

    The store is process-wide on purpose (one engine, one set of connections per process), so it outlives
    the datasets that used it; left up, its thread and connections would be in every later test's process
    (thread counts, descriptors). Tests must not depend on order.
    """
    yield
    remote = sys.modules.get("chute.remote")
    if remote is not None and remote._store is not None:
        remote.configure()
        gc.collect()


@pytest.fixture(scope="session")
def folder(tmp_path_factory) -> Path:
    """3 classes x 12 images."""
    return make_folder(tmp_path_factory.mktemp("folder"), 3, 12)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """960 small JPEGs: cheap to decode, so a consumer that sleeps is always the slower side."""
    root = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(1)
    data = [jpeg_bytes(natural_image(rng, 40, 32)) for _ in range(16)]
    (root / "a").mkdir()
    for i in range(960):
        (root / "a" / f"{i:04d}.jpg").write_bytes(data[i % 16])
    return root


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster for one test module (test_ray*.py), on loopback."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'chute[ray]')")
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    import chute.ray  # noqa: F401  (after init: nothing of it starts a cluster by itself here)

    yield
    ray.shutdown()
