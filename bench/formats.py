"""Training throughput from the formats datasets already live in (chute.formats: TFRecord, LMDB) against
the same JPEGs from a file list, and against a torch DataLoader reading the same file with PIL, in one run.

    python bench/formats.py [--images 2000] [--batch-size 128] [--rounds 3] [--workers 2] [--threads 0]

The JPEGs are chute's bench set (python/chute/bench/dataset.py: ImageNet-like, ~500x375, ~100 KB, generated
once and cached). They are written, by each format's own tools (python/tests/support/format_writers.py: the
``tfrecord`` package's writer, py-lmdb), as: TFRecord in the layout of TF's model garden ImageNet script
(8 shards) and of TFDS (one file); LMDB as folder2lmdb writes it (pickled tuples, ``__keys__``), as pickled
dicts, as Caffe Datums (convert_imageset --encoded) and as raw image bytes. Indexes are built before the
timing (the one-time scan is reported on its own).

Contenders, interleaved round by round after a warm-up epoch each (chute.bench.harness), every one with
the train pipeline (RandomResizedCrop(224), flip, Normalize; float32 output) and shuffling:
* chute.Loader over the file list of the JPEGs (the reference: the ratio's denominator);
* chute.Loader over each format;
* torch's DataLoader (``--workers``, persistent) over a map-style Dataset reading the same TFRecord file
  (records by offset, tf.train.Example parsed by protobuf) and the same LMDB (folder2lmdb's own dataset
  code: ``txn.get``, ``pickle.loads``), decoding with PIL, with torchvision's transforms (or chute's PIL
  reference of them).
Printed: images/s (median and range) and each format's ratio to the file list; the files are read once
first (warm page cache: the figures are hot, not cold-disk, ones).
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import struct
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import chute
from chute import _native
from chute.bench.harness import Contender, interleave, time_call, time_epoch
from chute.bench.torch_peer import IMAGENET_MEAN, IMAGENET_STD, make_train_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))  # not in the wheel
from support import format_writers as fw  # noqa: E402


class LmdbPeer(Dataset):
    """folder2lmdb's dataset: the environment opened in each worker, records unpickled, PIL decode."""

    def __init__(self, path: str, transform):
        self.path, self.transform, self.env = path, transform, None
        import lmdb

        with lmdb.open(path, readonly=True, lock=False, readahead=False, meminit=False) as env, env.begin() as txn:
            self.keys = pickle.loads(txn.get(b"__keys__"))

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i):
        if self.env is None:
            import lmdb

            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False, meminit=False)
        with self.env.begin(write=False) as txn:
            image, label = pickle.loads(txn.get(self.keys[i]))
        return self.transform(Image.open(io.BytesIO(image)).convert("RGB")), label


class TfRecordPeer(Dataset):
    """Records read by offset from the TFRecord files (an index built once, as the tfrecord package's
    tfrecord2idx does), each Example parsed by protobuf, PIL decode."""

    def __init__(self, paths: list[str], transform):
        self.transform, self.records = transform, []
        for path in paths:
            with open(path, "rb") as f:
                while header := f.read(12):
                    (length,) = struct.unpack("<Q", header[:8])
                    self.records.append((path, f.tell(), length))
                    f.seek(length + 4, os.SEEK_CUR)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):
        from tfrecord import example_pb2

        path, offset, length = self.records[i]
        with open(path, "rb") as f:
            f.seek(offset)
            example = example_pb2.Example.FromString(f.read(length))
        feature = example.features.feature
        image = feature["image/encoded"].bytes_list.value[0]
        label = feature["image/class/label"].int64_list.value[0]
        return self.transform(Image.open(io.BytesIO(image)).convert("RGB")), label


def write_formats(root: Path, out: Path, items) -> dict[str, Path]:
    """Each layout once (reused while its marker says it was written from this many images)."""
    marker = out / f"COMPLETE-{len(items)}"
    paths = {
        "TFRecord (model garden, 8 shards)": out / "garden",
        "TFRecord (TFDS)": out / "tfds.tfrecord",
        "LMDB (folder2lmdb tuples)": out / "folder2lmdb",
        "LMDB (pickled dicts)": out / "dicts",
        "LMDB (Caffe Datum)": out / "caffe",
        "LMDB (raw images)": out / "raw",
    }
    if marker.exists():
        return paths
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "garden").mkdir()
    fw.write_model_garden([out / "garden" / f"train-{s:05d}-of-00008" for s in range(8)], items)
    fw.write_tfds(out / "tfds.tfrecord", items)
    fw.write_folder2lmdb(out / "folder2lmdb", items, commit_every=500)
    fw.write_lmdb_dicts(out / "dicts", items)
    fw.write_caffe_lmdb(out / "caffe", items, [f"{i}.jpg" for i in range(len(items))])
    fw.write_raw_lmdb(out / "raw", [image for image, _ in items], [f"{i:08d}".encode() for i in range(len(items))])
    marker.write_text("")
    return paths


def read_epoch(source) -> int:
    """Every sample read once, shuffled, on one thread (chute's read stage, no decode); the count."""
    _, _, failed = _native.read_all(source._native, 1, True)
    if failed:
        raise RuntimeError(f"{failed} reads failed in {source!r}")
    return len(source)


def read_all(path: Path) -> None:
    for p in [path] if path.is_file() else sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(8 << 20):
                    pass


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3, help="timed epochs per contender, interleaved (median)")
    p.add_argument("--workers", type=int, default=2, help="the torch DataLoader peers' num_workers")
    p.add_argument("--threads", type=int, default=0, help="chute's threads (0: auto)")
    p.add_argument("--root", type=Path, default=None, help="dataset directory (default: chute's bench cache)")
    args = p.parse_args(argv)

    from chute.bench.dataset import ensure_dataset

    root = ensure_dataset(args.root, num_images=args.images)
    folder = chute.ImageFolder(root)
    items = [(Path(path).read_bytes(), label) for path, label in folder.samples]
    out = root.parent / f"{root.name}-formats"
    file_list = out.parent / f"{root.name}-list.txt"
    file_list.write_text("".join(f"{path} {label}\n" for path, label in folder.samples))
    formats = write_formats(root, out, items)
    for path in [root, *formats.values()]:
        read_all(path)

    transforms = [
        chute.RandomResizedCrop(224),
        chute.RandomHorizontalFlip(),
        chute.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]
    options = dict(batch_size=args.batch_size, shuffle=True, transforms=transforms, dtype=torch.float32)
    if args.threads:
        options["num_threads"] = args.threads
    sources = {"file list of the JPEGs": chute.FileList(file_list)}
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in formats.items():
            start = time.perf_counter()
            chute.open(path, cache_dir=scratch)  # an empty cache: the one-time scan
            scanned = time.perf_counter() - start
            start = time.perf_counter()
            sources[name] = chute.open(path, cache_dir=scratch)
            print(
                f"opened {name}: {len(sources[name])} samples; the one-time scan {scanned:.3f} s, "
                f"then from its cached index {time.perf_counter() - start:.3f} s"
            )
    loaders = {name: chute.Loader(source, **options) for name, source in sources.items()}
    peers = {
        "torch DataLoader + PIL, TFRecord (model garden)": TfRecordPeer(
            sorted(str(p) for p in formats["TFRecord (model garden, 8 shards)"].iterdir()), make_train_transform()
        ),
        "torch DataLoader + PIL, LMDB (folder2lmdb)": LmdbPeer(
            str(formats["LMDB (folder2lmdb tuples)"]), make_train_transform()
        ),
    }
    torch_loaders = {
        name: DataLoader(
            ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, persistent_workers=args.workers > 0
        )
        for name, ds in peers.items()
    }
    contenders = [Contender(f"chute.Loader, {n}", lambda dl=dl: time_epoch(dl)) for n, dl in loaders.items()]
    contenders += [Contender(n, lambda dl=dl: time_epoch(dl)) for n, dl in torch_loaders.items()]
    print(
        f"{len(items)} JPEGs ({sum(len(i) for i, _ in items) / len(items) / 1e3:.0f} KB each) from {root}; "
        f"train pipeline, batch {args.batch_size}; cores: {len(os.sched_getaffinity(0))}; torch {torch.__version__}"
    )
    try:
        interleave(contenders, rounds=args.rounds)
    finally:
        for loader in loaders.values():
            loader.close()
        for dl in torch_loaders.values():
            iterator = getattr(dl, "_iterator", None)
            if iterator is not None:
                iterator._shutdown_workers()
    reference = contenders[0].rate
    width = max(len(c.name) for c in contenders)
    for c in contenders:
        print(
            f"  {c.name:<{width}}  {c.rate:7.0f} img/s ({c.summary.range_text()})  {c.rate / reference:5.2f}x the file list"
        )
    by_name = {c.name: c for c in contenders}
    for fmt, peer in (("TFRecord (model garden, 8 shards)", 0), ("LMDB (folder2lmdb tuples)", 1)):
        chute_rate = by_name[f"chute.Loader, {fmt}"].rate
        print(f"  {fmt}: chute {chute_rate / contenders[len(loaders) + peer].rate:.2f}x the torch DataLoader + PIL")
    # The read stage alone (no decode): each source's samples read once in a shuffled order on one thread.
    readers = [Contender(name, lambda s=source: time_call(lambda: read_epoch(s))) for name, source in sources.items()]
    interleave(readers, rounds=args.rounds)
    print("the read stage alone (one thread, shuffled, no decode):")
    for c in readers:
        print(
            f"  {c.name:<{width}}  {c.rate:7.0f} reads/s ({c.summary.range_text()})  {c.rate / readers[0].rate:5.2f}x"
        )
    load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    busy = " (above the core count: other processes took CPU time from all contenders)" if load > cores else ""
    print(f"load average during the run: {load:.2f} on {cores} cores{busy}")


if __name__ == "__main__":
    main()
