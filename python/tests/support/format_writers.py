"""Datasets in other formats, written by those formats' own tools, for chute's tests and benchmarks
(python/tests/test_formats.py, bench/formats.py, scripts/make_fuzz_corpus.py): TFRecord files through the
``tfrecord`` package's writer (tf.train.Example serialised by protobuf, without TensorFlow) and LMDB
environments through py-lmdb (liblmdb), in the layouts chute.formats reads. The Caffe Datum records are
written field by field as caffe.proto numbers them (docs/FORMATS.md), since Caffe itself is not installable
here. Test and benchmark tooling: it imports ``lmdb`` and ``tfrecord`` (``scripts/setup.sh --dev``)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence

Items = Sequence[tuple[bytes, int]]  # (encoded image, label)


def write_tfds(path: str | os.PathLike, items: Items) -> None:
    """TFDS's layout for image classification (``image``, ``label``), one record per item."""
    from tfrecord import TFRecordWriter

    writer = TFRecordWriter(os.fspath(path))
    for i, (image, label) in enumerate(items):
        writer.write({"image": (image, "byte"), "label": (label, "int"), "file_name": (f"{i}.jpg".encode(), "byte")})
    writer.close()


def write_model_garden(paths: Sequence[str | os.PathLike], items: Items) -> None:
    """As TF's model garden ImageNet script (``build_imagenet_data.py``, ``_convert_to_example``) writes a
    split into ``len(paths)`` shards: labels stored from 1, and its other features beside the image."""
    from tfrecord import TFRecordWriter

    per = -(-len(items) // len(paths))
    for s, path in enumerate(paths):
        writer = TFRecordWriter(os.fspath(path))
        for i, (image, label) in enumerate(items[s * per : (s + 1) * per], s * per):
            writer.write(
                {
                    "image/height": (0, "int"),
                    "image/width": (0, "int"),
                    "image/colorspace": (b"RGB", "byte"),
                    "image/channels": (3, "int"),
                    "image/class/label": (label + 1, "int"),
                    "image/class/synset": (f"n{label:08d}".encode(), "byte"),
                    "image/class/text": (b"a class", "byte"),
                    "image/object/bbox/xmin": ([0.1], "float"),
                    "image/object/bbox/ymin": ([0.2], "float"),
                    "image/object/bbox/xmax": ([0.9], "float"),
                    "image/object/bbox/ymax": ([0.8], "float"),
                    "image/object/bbox/label": ([label + 1], "int"),
                    "image/format": (b"JPEG", "byte"),
                    "image/filename": (f"img_{i:06d}.JPEG".encode(), "byte"),
                    "image/encoded": (image, "byte"),
                }
            )
        writer.close()


def _lmdb(path: str | os.PathLike, items: Items, **kwargs):
    import lmdb

    size = sum(len(image) for image, _ in items)
    return lmdb.open(os.fspath(path), map_size=4 * size + (64 << 20), **kwargs)


def write_folder2lmdb(path: str | os.PathLike, items: Items, *, protocol: int | None = None, commit_every: int = 64):
    """As the widely copied folder2lmdb.py: each record ``pickle.dumps((image_bytes, label))`` under the key
    ``str(index).encode()``, committed every ``commit_every`` records, then ``__keys__`` (the pickled list of
    keys) and ``__len__``."""
    env = _lmdb(path, items, subdir=True, readonly=False, meminit=False, map_async=True)
    txn = env.begin(write=True)
    for i, (image, label) in enumerate(items):
        txn.put(f"{i}".encode("ascii"), pickle.dumps((image, label), protocol=protocol))
        if (i + 1) % commit_every == 0:
            txn.commit()
            txn = env.begin(write=True)
    txn.commit()
    keys = [f"{i}".encode("ascii") for i in range(len(items))]
    with env.begin(write=True) as txn:
        txn.put(b"__keys__", pickle.dumps(keys, protocol=protocol))
        txn.put(b"__len__", pickle.dumps(len(keys), protocol=protocol))
    env.sync()
    env.close()


def write_lmdb_dicts(path: str | os.PathLike, items: Items, *, image_key: str = "image", label_key: str = "label"):
    """Records ``pickle.dumps({image_key: image_bytes, label_key: label})`` under zero-padded keys."""
    env = _lmdb(path, items)
    with env.begin(write=True) as txn:
        for i, (image, label) in enumerate(items):
            txn.put(f"{i:08d}".encode(), pickle.dumps({image_key: image, label_key: label, "index": i}))
    env.close()


def caffe_datum(image: bytes, label: int) -> bytes:
    """A Caffe Datum as ``convert_imageset --encoded`` stores it (ReadFileToDatum: data, label, encoded):
    field 4 (data, bytes), field 5 (label, int32 varint), field 7 (encoded, bool), in field order as protobuf
    serialises them."""

    def varint(v: int) -> bytes:
        v &= (1 << 64) - 1  # int32 negatives are 10-byte varints
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        return bytes(out) + bytes([v])

    return b"\x22" + varint(len(image)) + image + b"\x28" + varint(label) + b"\x38\x01"


def write_caffe_lmdb(path: str | os.PathLike, items: Items, names: Sequence[str]) -> None:
    """As ``convert_imageset --encoded`` writes: keys ``"%08d_%s" % (index, file name)``, Datum values."""
    env = _lmdb(path, items)
    with env.begin(write=True) as txn:
        for i, ((image, label), name) in enumerate(zip(items, names)):
            txn.put(f"{i:08d}_{name}".encode(), caffe_datum(image, label))
    env.close()


def write_raw_lmdb(path: str | os.PathLike, images: Sequence[bytes], keys: Sequence[bytes]) -> None:
    """The image files' bytes as values, under ``keys``."""
    env = _lmdb(path, [(image, 0) for image in images])
    with env.begin(write=True) as txn:
        for key, image in zip(keys, images):
            txn.put(key, image)
    env.close()
