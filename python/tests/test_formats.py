"""chute.formats: TFRecord files and LMDB environments written by those formats' own tools (the ``tfrecord``
package's writer, py-lmdb) read in place, batch for batch the same pixels and labels as the same JPEGs from
a file list; everywhere a source works (the Loader's orders, ranks and resume, pack, inspect)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import jpeg_bytes, natural_image
from support import format_writers as fw

import chute

pytest.importorskip("lmdb")
pytest.importorskip("tfrecord")

N = 40


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """N JPEGs of varied sizes, their labels, and a file list of them (the reference)."""
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(3)
    items, lines = [], []
    for i in range(N):
        w, h = int(rng.integers(60, 140)), int(rng.integers(50, 120))
        data = jpeg_bytes(natural_image(rng, w, h), quality=90, subsampling=i % 3)
        label = int(rng.integers(0, 5))
        (root / f"img_{i:03d}.jpg").write_bytes(data)
        items.append((data, label))
        lines.append(f"img_{i:03d}.jpg {label}\n")
    (root / "list.txt").write_text("".join(lines))
    return items, root / "list.txt"


@pytest.fixture(scope="module")
def datasets(jpegs, tmp_path_factory):
    """Each layout, written by its tools: {name: (path, open options, label offset)}."""
    items, _ = jpegs
    root = tmp_path_factory.mktemp("formats")
    fw.write_tfds(root / "tfds.tfrecord", items)
    garden = root / "garden"
    garden.mkdir()
    fw.write_model_garden([garden / f"train-{s:05d}-of-00003" for s in range(3)], items)
    fw.write_folder2lmdb(root / "folder2lmdb", items, commit_every=7)
    fw.write_folder2lmdb(root / "folder2lmdb_p5", items, protocol=5)
    fw.write_lmdb_dicts(root / "dicts", items)
    fw.write_caffe_lmdb(root / "caffe", items, [f"img_{i:03d}.jpg" for i in range(N)])
    keys = [f"img_{i:03d}".encode() for i in range(N)]
    fw.write_raw_lmdb(root / "raw", [image for image, _ in items], keys)
    (root / "raw_labels.txt").write_text("".join(f"img_{i:03d} {label}\n" for i, (_, label) in enumerate(items)))
    by_key = {k: label for k, (_, label) in zip(keys, items)}
    return {
        "tfds": (root / "tfds.tfrecord", {}, 0),
        "model_garden": (garden, {}, 1),
        "folder2lmdb": (root / "folder2lmdb", {}, 0),
        "folder2lmdb_protocol5": (root / "folder2lmdb_p5", {}, 0),
        "pickled_dicts": (root / "dicts", {}, 0),
        "caffe_datum": (root / "caffe", {}, 0),
        "raw_label_callable": (root / "raw", {"labels": by_key.__getitem__}, 0),
        "raw_label_file": (root / "raw", {"labels": root / "raw_labels.txt"}, 0),
    }


LAYOUTS = [
    "tfds",
    "model_garden",
    "folder2lmdb",
    "folder2lmdb_protocol5",
    "pickled_dicts",
    "caffe_datum",
    "raw_label_callable",
    "raw_label_file",
]


def _batches(source, **kwargs):
    options = dict(batch_size=8, shuffle=True, seed=5, transforms=[chute.RandomResizedCrop(32)], num_threads=2)
    options.update(kwargs)
    with chute.Loader(source, **options) as loader:
        return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_same_pixels_and_labels_as_the_jpegs_batch_for_batch(layout, datasets, jpegs):
    items, file_list = jpegs
    path, options, offset = datasets[layout]
    dataset = chute.open(path, **options)
    assert len(dataset) == N
    for i in (0, 17, N - 1):  # the stored bytes are the JPEG files' bytes
        assert dataset[i] == (items[i][0], items[i][1] + offset)
    expected = _batches(chute.FileList(file_list))
    got = _batches(dataset)
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(x, ex)
        assert torch.equal(y - offset, ey)


def test_what_was_detected(datasets):
    tfds = chute.open(datasets["tfds"][0])
    assert (tfds.image_key, tfds.label_key) == ("image", "label")
    assert ("file_name", "bytes") in tfds.features
    garden = chute.open(datasets["model_garden"][0])
    assert (garden.image_key, garden.label_key) == ("image/encoded", "image/class/label")
    assert isinstance(garden, chute.formats.TFRecordDataset) and len(garden.paths) == 3
    assert chute.open(datasets["folder2lmdb"][0]).layout == "pickled tuple"
    assert chute.open(datasets["folder2lmdb"][0]).keys_record
    assert chute.open(datasets["pickled_dicts"][0]).layout == "pickled dict"
    caffe = chute.open(datasets["caffe_datum"][0])
    assert caffe.layout == "Caffe Datum" and not caffe.keys_record
    assert caffe.keys()[3] == b"00000003_img_003.jpg"
    raw = chute.open(datasets["raw_label_file"][0])  # without labels: unlabelled
    assert raw.layout == "raw image" and set(raw.targets) == {-1}


def test_folder2lmdb_order_is_its_keys_record_not_lmdbs(datasets, jpegs):
    """LMDB sorts b'10' before b'2'; folder2lmdb's datasets index __keys__, so sample 2 is key b'2'."""
    dataset = chute.open(datasets["folder2lmdb"][0])
    assert dataset.keys()[:12] == [str(i).encode() for i in range(12)]
    assert dataset[2][0] == jpegs[0][2][0]


def test_named_features_and_keys(datasets, tmp_path, jpegs):
    items, _ = jpegs
    garden = datasets["model_garden"][0]
    by_name = chute.open(garden, image_key="image/encoded", label_key="image/object/bbox/label")
    assert by_name.targets == [label + 1 for _, label in items]
    with pytest.raises(ValueError, match=r"no bytes feature 'img' \(image_key\).*image/encoded \(bytes\)"):
        chute.open(garden, image_key="img")
    with pytest.raises(ValueError, match="no int64 feature 'image/format'"):
        chute.open(garden, label_key="image/format")
    fw.write_lmdb_dicts(tmp_path / "other", items[:4], image_key="jpg", label_key="cls")
    with pytest.raises(ValueError, match=r"record 00000000: .*dict with keys \('jpg', 'cls', 'index'\)"):
        chute.open(tmp_path / "other")
    other = chute.open(tmp_path / "other", image_key="jpg", label_key="cls")
    assert other[1] == items[1]
    with pytest.raises(ValueError, match="apply to TFRecord and LMDB datasets"):
        chute.open(jpegs[1].parent, image_key="x")


@pytest.mark.parametrize("layout", ["model_garden", "folder2lmdb"])
def test_orders_ranks_and_resume(layout, datasets):
    path = datasets[layout][0]
    dataset = chute.open(path)
    assert sum(dataset._native.shard_sizes()) == N  # shards: a file each (TFRecord), runs of the file (LMDB)
    by_shards = _batches(dataset, order="shards", shard_window=2, drop_last=False)
    assert sorted(torch.cat([y for _, y in by_shards]).tolist()) == sorted(dataset.targets)
    seen = []
    for rank in range(2):
        seen += [y for _, y in _batches(dataset, rank=rank, world_size=2, batch_size=4)]
    assert sorted(torch.cat(seen).tolist()) == sorted(dataset.targets)
    whole = _batches(dataset)
    with chute.Loader(dataset, batch_size=8, shuffle=True, seed=5, transforms=[chute.RandomResizedCrop(32)]) as loader:
        it = iter(loader)
        next(it)
        next(it)
        state = loader.state_dict()
    with chute.Loader(dataset, batch_size=8, shuffle=True, seed=5, transforms=[chute.RandomResizedCrop(32)]) as loader:
        loader.load_state_dict(state)
        rest = [(x.clone(), y.clone()) for x, y in loader]
    assert len(rest) == len(whole) - 2
    for (x, y), (ex, ey) in zip(rest, whole[2:]):
        assert torch.equal(x, ex) and torch.equal(y, ey)


@pytest.mark.parametrize("layout", ["tfds", "model_garden", "folder2lmdb", "caffe_datum", "raw_label_file"])
def test_pack_reads_back_identical(layout, datasets, tmp_path):
    path, options, _ = datasets[layout]
    source = chute.open(path, **options)
    summary = chute.pack(source, tmp_path / "packed", num_threads=2)
    assert summary.samples == N
    packed = chute.open(tmp_path / "packed")
    for i in range(N):
        assert packed[i] == source[i]
    if layout != "raw_label_file":  # the CLI, from the path (labels from a file need the API)
        done = subprocess.run(
            [sys.executable, "-m", "chute.cli", "pack", str(path), str(tmp_path / "cli"), "--max-side", "48"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        smaller = chute.open(tmp_path / "cli")
        assert len(smaller) == N and smaller.targets == source.targets
        assert all(max(chute._native.decode_rgb(smaller[i][0])[1:]) <= 48 for i in range(N))


def test_pack_raw_records(datasets, tmp_path):
    source = chute.open(datasets["tfds"][0])
    chute.pack(source, tmp_path / "raw", raw=True)
    raw = chute.open(tmp_path / "raw")
    for i in (0, N - 1):
        assert chute._native.decode_rgb(raw[i][0]) == chute._native.decode_rgb(source[i][0])


@pytest.mark.parametrize("layout", ["model_garden", "caffe_datum"])
def test_inspect(layout, datasets):
    path = datasets[layout][0]
    done = subprocess.run(
        [sys.executable, "-m", "chute.cli", "inspect", str(path), "--json", "--verify"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["samples"] == N
    assert info["kind"] == ("TFRecord" if layout == "model_garden" else "LMDB")
    assert info["verified"]["bad"] == []
    assert all(Path(s["file"]).exists() and s["index"] for s in info["shards"])


def test_indexes_are_cached_apart_from_the_data_and_rebuilt_when_it_changes(jpegs, tmp_path, monkeypatch):
    items, _ = jpegs
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data"
    data.mkdir()
    fw.write_tfds(data / "a.tfrecord", items[:5])
    first = chute.open(data / "a.tfrecord")
    index = first._native.index_paths()[0]
    assert index.startswith(str(tmp_path / "cache" / "span-index"))
    assert sorted(p.name for p in data.iterdir()) == ["a.tfrecord"]  # nothing written beside the data
    stamp = Path(index).stat().st_mtime_ns
    assert chute.open(data / "a.tfrecord")._native.index_paths()[0] == index
    assert Path(index).stat().st_mtime_ns == stamp  # reused, not rebuilt
    fw.write_tfds(data / "a.tfrecord", items[5:12])  # rewritten in place: rebuilt
    again = chute.open(data / "a.tfrecord")
    assert len(again) == 7 and again[0] == items[5]


def test_small_lmdb_values_in_shared_leaf_pages_still_read_in_shards(tmp_path):
    """Values under half a page sit inside leaf pages, each after (below) the previous one's: in about file
    order all the same, so the shard-window order applies."""
    rng = np.random.default_rng(4)
    images = [jpeg_bytes(natural_image(rng, 24, 24), quality=50) for _ in range(60)]
    assert max(len(i) for i in images) < 2000  # inline in leaf pages, not in overflow pages
    fw.write_raw_lmdb(tmp_path / "small", images, [f"{i:04d}".encode() for i in range(60)])
    dataset = chute.open(tmp_path / "small", labels=lambda key: int(key) % 2)
    assert dataset._native.shard_sizes() == [60]
    got = _batches(dataset, order="shards", batch_size=10, transforms=[chute.Resize((8, 8))])
    assert sorted(torch.cat([y for _, y in got]).tolist()) == sorted(dataset.targets)
