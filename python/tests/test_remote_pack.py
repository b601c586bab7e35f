"""`chute pack` to s3://: the dataset is uploaded shards first, the index last, each object atomic; it then
opens from the bucket with the batches of the local pack. Against moto (an S3 emulator) on loopback."""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from PIL import Image
from support import s3_server

import chute
from chute import remote
from chute.cli import main as cli


@pytest.fixture(scope="module")
def s3():
    with s3_server.MotoServer(auth=True) as server:
        server.client().create_bucket(Bucket="data")
        yield server


@pytest.fixture
def s3_env(s3, monkeypatch, tmp_path):
    for k, v in s3.env.items():
        if v:
            monkeypatch.setenv(k, v)
        else:  # "" means unset (no profile from ~/.aws)
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(remote, "_store", None)  # a store that reads this environment
    yield s3
    remote._store = None


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    for c in range(3):
        (root / f"class{c}").mkdir()
        for i in range(20):
            Image.new("RGB", (40 + i, 30 + c), (10 * i, 80 * c, 5)).save(root / f"class{c}" / f"{i:03d}.jpg")
    return root


def batches(dataset) -> list:
    loader = chute.Loader(
        dataset, batch_size=8, shuffle=True, seed=3, order="shards", shard_window=2, transforms=[chute.CenterCrop(24)]
    )
    with loader:
        return [(x.clone(), y.clone()) for x, y in loader]


def test_pack_to_s3_opens_with_the_local_packs_batches(s3_env, images, tmp_path):
    assert cli(["pack", str(images), "s3://data/train/", "--shard-size", "4096"]) == 0
    keys = sorted(o["Key"] for o in s3_env.client().list_objects_v2(Bucket="data", Prefix="train/")["Contents"])
    chute.pack(str(images), str(tmp_path / "local"), shard_size=4096)
    assert keys == sorted(f"train/{n}" for n in os.listdir(tmp_path / "local"))
    assert len(keys) > 4  # several shards and the index
    remote_batches, local_batches = (
        batches(chute.open("s3://data/train/")),
        batches(chute.open(str(tmp_path / "local"))),
    )
    assert len(remote_batches) == len(local_batches) == 8  # 60 samples, batches of 8
    for (a, la), (b, lb) in zip(remote_batches, local_batches):
        assert torch.equal(a, b) and torch.equal(la, lb)
    # No staging directory is left behind.
    assert not [n for n in os.listdir(os.environ["CHUTE_CACHE_DIR"]) if n.startswith("chute-pack-")]


def test_a_failed_upload_leaves_no_dataset(s3_env, images):
    with pytest.raises(OSError, match="nosuchbucket"):
        chute.pack(str(images), "s3://nosuchbucket/train/", shard_size=4096)
    with pytest.raises(OSError):
        chute.open("s3://nosuchbucket/train/")


def test_the_index_is_uploaded_last(s3_env, images, tmp_path, monkeypatch):
    """An upload that fails on a shard never writes the index: what is there does not open as a dataset."""
    from chute import packed

    real_store = remote.store()

    class FailingStore:
        def __init__(self):
            self.calls = itertools.count(1)  # next() is atomic under the GIL: the uploads run on threads

        def begin_upload(self, url):
            if next(self.calls) == 3:
                raise OSError(f"injected failure uploading {url}")
            return real_store.begin_upload(url)

    with monkeypatch.context() as m:
        m.setattr(remote, "store", lambda: FailingStore())
        with pytest.raises(OSError, match="injected failure"):
            packed.pack(str(images), "s3://data/partial/", shard_size=4096, num_threads=1)
    listed = s3_env.client().list_objects_v2(Bucket="data", Prefix="partial/").get("Contents", [])
    keys = {o["Key"] for o in listed}
    assert keys and "partial/index.chidx" not in keys  # some shards went up, never the index
    with pytest.raises(FileNotFoundError, match="index.chidx is missing"):
        chute.open("s3://data/partial/")
