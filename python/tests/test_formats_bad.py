"""chute.formats on bad input: a clear per-sample error naming the file, key and offset, ``on_error='skip'``
reporting, a clear open error for a file whose structure is broken, and no crash on truncated or hostile
files (the parsers themselves are also fuzzed: cpp/fuzz/{tfrecord,lmdb,pickle_span,caffe_datum,parquet_pages,
hdf5_heap}_fuzz.cc); a missing optional library is a one-line error naming what to install."""

from __future__ import annotations

import gzip
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import jpeg_bytes, natural_image
from support import format_writers as fw

import chute

lmdb = pytest.importorskip("lmdb")
pytest.importorskip("tfrecord")
hf = pytest.importorskip("datasets")
h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def items():
    rng = np.random.default_rng(9)
    return [(jpeg_bytes(natural_image(rng, 48, 40)), i % 3) for i in range(12)]


def _load_all(source, on_error):
    with chute.Loader(source, batch_size=4, transforms=[chute.Resize((16, 16))], on_error=on_error) as loader:
        labels = [y for _, y in loader]
        return labels, loader.errors()


def test_a_corrupt_tfrecord_record_is_a_sample_error_naming_file_record_and_offset(items, tmp_path):
    path = tmp_path / "x.tfrecord"
    fw.write_tfds(path, items)
    raw = bytearray(path.read_bytes())
    offset = raw.index(items[5][0]) + 100  # a byte inside record 5's image
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    dataset = chute.open(path)
    assert len(dataset) == len(items)
    with pytest.raises(chute.SampleError) as raised:
        _load_all(dataset, "raise")
    e = raised.value
    assert e.index == 5 and e.path == f"{path}:5"
    assert "at offset" in e.reason and "CRC-32C does not match" in e.reason
    labels, errors = _load_all(dataset, "skip")
    assert sum(len(y) for y in labels) == len(items) - 1
    assert [err.index for err in errors] == [5]
    # Without the check the damaged record reads (and fails in the decoder, or decodes damaged)
    assert chute.open(path, verify=False)[5][0] != items[5][0]


def test_a_record_that_does_not_hold_the_lmdb_layout_is_a_sample_error(items, tmp_path):
    fw.write_folder2lmdb(tmp_path / "db", items)
    env = lmdb.open(str(tmp_path / "db"), map_size=64 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"10", pickle.dumps(("not bytes", 1)))  # past the first 8 records, which set the layout
        txn.delete(b"11")  # still listed in __keys__
    env.close()
    dataset = chute.open(tmp_path / "db")
    assert [i for i, _ in dataset.bad_samples] == [10, 11]
    with pytest.raises(chute.SampleError) as raised:
        _load_all(dataset, "raise")
    assert raised.value.index == 10 and raised.value.path.endswith("data.mdb:10")
    assert "tuple (str, int)" in raised.value.reason
    labels, errors = _load_all(dataset, "skip")
    assert sum(len(y) for y in labels) == len(items) - 2
    assert [e.index for e in errors] == [10, 11]
    assert "listed in __keys__ but is not in the database" in errors[1].reason


def test_broken_structure_fails_the_open_with_a_clear_error(items, tmp_path):
    path = tmp_path / "x.tfrecord"
    fw.write_tfds(path, items)
    whole = path.read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(whole[: len(whole) - 50])
    with pytest.raises(RuntimeError, match=r"cut.tfrecord: record 11 at offset \d+: .*truncated TFRecord file"):
        chute.open(tmp_path / "cut.tfrecord")
    (tmp_path / "x.tfrecord.gz").write_bytes(gzip.compress(whole))
    with pytest.raises(ValueError, match="GZIP-compressed.*decompress it once"):
        chute.open(tmp_path / "x.tfrecord.gz")
    fw.write_folder2lmdb(tmp_path / "db", items)
    data = (tmp_path / "db" / "data.mdb").read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "data.mdb").write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="truncated LMDB file"):
        chute.open(tmp_path / "cut")


def test_bytes_pickled_by_python3_with_protocol_2_are_refused_with_why(items, tmp_path):
    fw.write_folder2lmdb(tmp_path / "p2", items, protocol=2)
    with pytest.raises(ValueError, match="data.mdb: the __keys__ record .*protocol 2 by Python 3.*protocol 3 or later"):
        chute.open(tmp_path / "p2")


def test_an_unknown_lmdb_layout_names_the_key(items, tmp_path):
    env = lmdb.open(str(tmp_path / "db"), map_size=64 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"first", b"\x00\x01not an image")
    env.close()
    with pytest.raises(ValueError, match=r"record first: a value of 14 bytes \(starting 0x0001"):
        chute.open(tmp_path / "db")


def test_null_and_unembedded_images_are_sample_errors_naming_the_row(items, tmp_path):
    rows = [{"bytes": image, "path": None} for image, _ in items]
    rows[3] = None
    elsewhere = tmp_path / "elsewhere.jpg"  # datasets sizes a path's file when saving: it must exist then
    elsewhere.write_bytes(items[7][0])
    rows[7] = {"bytes": None, "path": str(elsewhere)}  # an Image feature that kept only the path
    features = hf.Features({"image": hf.Image(), "label": hf.Value("int64")})
    ds = hf.Dataset.from_dict({"image": rows, "label": [y for _, y in items]}, features=features)
    # datasets' to_parquet and save_to_disk embed a path's file: a Parquet file of its table, as another writer
    # keeps it, and the Dataset object itself have the path-only row
    import pyarrow.parquet as pq

    pq.write_table(ds.data.table, tmp_path / "x.parquet")
    ds.save_to_disk(str(tmp_path / "disk"))
    for source, bad in (
        (chute.open(tmp_path / "x.parquet"), [3, 7]),
        (chute.open(ds), [3, 7]),
        (chute.open(tmp_path / "disk"), [3]),  # row 7 embedded
    ):
        assert [i for i, _ in source.bad_samples] == bad
        with pytest.raises(chute.SampleError) as raised:
            _load_all(source, "raise")
        assert raised.value.index == 3 and raised.value.path.endswith(":3")
        assert "row 3 has no image (null)" in raised.value.reason
        labels, errors = _load_all(source, "skip")
        assert sum(len(y) for y in labels) == len(items) - len(bad)
        assert [e.index for e in errors] == bad
        if 7 in bad:
            assert f"only a path ({str(elsewhere)!r})" in errors[1].reason
        else:
            assert source[7] == items[7]


def test_an_hdf5_element_never_written_is_a_sample_error(items, tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        images = f.create_dataset("images", (len(items),), dtype=h5py.vlen_dtype(np.uint8))
        for i, (image, _) in enumerate(items):
            if i != 4:
                images[i] = np.frombuffer(image, np.uint8)
        f.create_dataset("labels", data=np.arange(len(items)))
    dataset = chute.open(path)
    assert dataset.bad_samples == [(4, "/images[4]: an empty element (no image was written)")]
    labels, errors = _load_all(dataset, "skip")
    assert [e.index for e in errors] == [4] and errors[0].path == f"{path}:4"
    assert dataset[5] == (items[5][0], 5)


def test_layouts_that_cannot_be_read_in_place_say_what_to_do(items, tmp_path):
    fw.write_hdf5(tmp_path / "gz.h5", items, layout="fixed", chunks=(4,), compression="gzip")
    with pytest.raises(ValueError, match=r"/images is stored in compressed chunks.*h5repack -f /images:NONE"):
        chute.open(tmp_path / "gz.h5")
    with h5py.File(tmp_path / "pixels.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((2, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="/x holds decoded pixels, not encoded images"):
        chute.open(tmp_path / "pixels.h5")
    hf.DatasetDict({"train": fw.hf_dataset(items[:4]), "test": fw.hf_dataset(items[4:6])}).save_to_disk(
        str(tmp_path / "dict")
    )
    with pytest.raises(ValueError, match=r"a DatasetDict of splits \(train, test\): open one"):
        chute.open(tmp_path / "dict")
    assert len(chute.open(tmp_path / "dict" / "test")) == 2
    (tmp_path / "hub").mkdir()
    fw.write_hf_parquet(tmp_path / "hub" / "train-00000-of-00001.parquet", items[:4])
    fw.write_hf_parquet(tmp_path / "hub" / "test-00000-of-00001.parquet", items[4:6])
    with pytest.raises(ValueError, match=r"several splits \(test, train\): name one, such as"):
        chute.open(tmp_path / "hub")
    assert len(chute.open(tmp_path / "hub" / "train-*.parquet")) == 4


def test_keys_that_are_not_names_are_type_errors_saying_what_they_name(items, tmp_path):
    fw.write_hf_parquet(tmp_path / "x.parquet", items[:2])
    fw.write_hdf5(tmp_path / "x.h5", items[:2])
    with pytest.raises(TypeError, match=r"image_key must be a column name \(str\), got 3"):
        chute.open(tmp_path / "x.parquet", image_key=3)
    with pytest.raises(TypeError, match=r"label_key must be a dataset's path in the file \(str\), got b'y'"):
        chute.open(tmp_path / "x.h5", label_key=b"y")


@pytest.mark.parametrize(("module", "extra", "name"), [("pyarrow", "parquet", "x.parquet"), ("h5py", "hdf5", "x.h5")])
def test_a_missing_library_is_one_line_naming_what_to_install(module, extra, name, items, tmp_path, monkeypatch):
    (fw.write_hf_parquet if extra == "parquet" else fw.write_hdf5)(tmp_path / name, items[:2])
    for m in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, m, None)  # import fails, as when not installed
    with pytest.raises(ImportError) as raised:
        chute.open(tmp_path / name)
    assert str(raised.value).count("\n") == 0 and f"pip install 'chute[{extra}]'" in str(raised.value)


def _damage(good: bytes, rng: random.Random, trial: int) -> bytes:
    bad = bytearray(good)
    for _ in range(rng.choice((1, 4, 32))):
        bad[rng.randrange(len(bad))] = rng.randrange(256)
    if trial % 5 == 0:
        bad = bad[: rng.randrange(len(bad))]
    return bytes(bad)


def _open_and_read(target, cache_dir, outcomes: dict) -> None:
    """Opens a damaged file and reads every sample: each ends in a result or an error (counted), never a crash."""
    try:
        dataset = chute.open(target, cache_dir=cache_dir)
    except (ValueError, RuntimeError, OSError):
        outcomes["refused"] += 1
        return
    outcomes["opened"] += 1
    for i in range(len(dataset)):
        try:
            dataset[i]
        except (ValueError, RuntimeError, OSError):
            pass


@pytest.mark.parametrize("kind", ["parquet", "parquet_snappy", "arrow", "hdf5"])
def test_hostile_columnar_files_never_crash(kind, items, tmp_path):
    """Random damage to a Parquet, Arrow or HDF5 file: each open (pyarrow's or h5py's metadata, then chute's
    page and heap readers) and read ends in a result or an error, never a crash."""
    name = {"parquet": "good.parquet", "parquet_snappy": "good.parquet", "arrow": "good.arrow", "hdf5": "good.h5"}[kind]
    if kind == "parquet":
        fw.write_hf_parquet(tmp_path / name, items[:4])
    elif kind == "parquet_snappy":
        fw.write_pyarrow_parquet(tmp_path / name, items[:4], row_group_size=2)
    elif kind == "arrow":
        fw.write_save_to_disk(tmp_path / "disk", items[:4])
        (tmp_path / name).write_bytes((tmp_path / "disk" / "data-00000-of-00001.arrow").read_bytes())
    else:
        fw.write_hdf5(tmp_path / name, items[:4])
    good = (tmp_path / name).read_bytes()
    rng = random.Random(2)
    outcomes = {"opened": 0, "refused": 0}
    for trial in range(80):
        target = tmp_path / f"t{trial}{Path(name).suffix}"
        target.write_bytes(_damage(good, rng, trial))
        _open_and_read(target, tmp_path / "cache", outcomes)
    assert outcomes["opened"] and outcomes["refused"]


@pytest.mark.parametrize("kind", ["tfrecord", "lmdb"])
def test_hostile_files_never_crash(kind, items, tmp_path):
    """Random damage to every part of a file (headers, lengths, pages, pickles): each open and read ends in
    a result or an error, never a crash."""
    if kind == "tfrecord":
        fw.write_tfds(tmp_path / "good.tfrecord", items[:4])
        good = (tmp_path / "good.tfrecord").read_bytes()
    else:
        fw.write_folder2lmdb(tmp_path / "good", items[:4])
        good = (tmp_path / "good" / "data.mdb").read_bytes()
    rng = random.Random(1)
    outcomes = {"opened": 0, "refused": 0}
    for trial in range(150):
        bad = _damage(good, rng, trial)
        target = tmp_path / f"t{trial}"
        if kind == "tfrecord":
            target = target.with_suffix(".tfrecord")
            target.write_bytes(bad)
        else:
            target.mkdir()
            (target / "data.mdb").write_bytes(bad)
        _open_and_read(target, tmp_path / "cache", outcomes)
    assert outcomes["opened"] and outcomes["refused"]
