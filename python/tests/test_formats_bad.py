"""chute.formats on bad input: a clear per-sample error naming the file, key and offset, ``on_error='skip'``
reporting, a clear open error for a file whose structure is broken, and no crash on truncated or hostile
files (the parsers themselves are also fuzzed: cpp/fuzz/{tfrecord,lmdb,pickle_span,caffe_datum}_fuzz.cc)."""

from __future__ import annotations

import gzip
import pickle
import random

import numpy as np
import pytest
from conftest import jpeg_bytes, natural_image
from support import format_writers as fw

import chute

lmdb = pytest.importorskip("lmdb")
pytest.importorskip("tfrecord")


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
        bad = bytearray(good)
        for _ in range(rng.choice((1, 4, 32))):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        if trial % 5 == 0:
            bad = bad[: rng.randrange(len(bad))]
        target = tmp_path / f"t{trial}"
        if kind == "tfrecord":
            target = target.with_suffix(".tfrecord")
            target.write_bytes(bytes(bad))
        else:
            target.mkdir()
            (target / "data.mdb").write_bytes(bytes(bad))
        try:
            dataset = chute.open(target, cache_dir=tmp_path / "cache")
        except (ValueError, RuntimeError, OSError):
            outcomes["refused"] += 1
            continue
        outcomes["opened"] += 1
        for i in range(len(dataset)):
            try:
                dataset[i]
            except (ValueError, RuntimeError, OSError):
                pass
    assert outcomes["opened"] and outcomes["refused"]
