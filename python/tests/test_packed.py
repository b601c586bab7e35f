"""Packed shards, tar / WebDataset shards and file lists: round trips against the ImageFolder they came
from, byte for byte, the CLI, and every kind of damaged input."""

from __future__ import annotations

import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

import chute
from chute import _native
from chute.cli import main as cli_main


def collect(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.fixture(scope="module")
def packed(folder, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("packed") / "ds"
    summary = chute.pack(folder, dst, shard_size="100KB", num_threads=2)
    assert summary.samples == 36 and summary.shards > 3
    return dst


def test_round_trip_is_byte_identical_with_the_same_labels_and_order(folder, packed):
    source = chute.ImageFolder(folder)
    ds = chute.open(packed)
    assert isinstance(ds, chute.PackedDataset)
    assert len(ds) == len(source) and ds.classes == source.classes and ds.targets == source.targets
    for i, (path, label) in enumerate(source.samples):
        data, packed_label = ds[i]
        assert data == Path(path).read_bytes(), path
        assert packed_label == label
        assert ds.samples[i][0] == os.path.relpath(path, folder)
    for bad in (-1, len(ds)):
        with pytest.raises(IndexError):
            ds[bad]
        with pytest.raises(IndexError):
            ds._native.label(bad)
        with pytest.raises(IndexError):
            ds._native.name(bad)
    assert sorted(p.name for p in packed.iterdir()) == ["index.chidx"] + [
        f"shard-{i:05d}.chute" for i in range(len(list(packed.glob("*.chute"))))
    ]


def test_loader_gives_the_same_batches_from_shards_as_from_the_folder(folder, packed):
    kwargs = dict(
        batch_size=7, shuffle=True, seed=3, transforms=[chute.RandomResizedCrop(48), chute.RandomHorizontalFlip()]
    )
    a = collect(chute.Loader(chute.ImageFolder(folder), **kwargs))
    b = collect(chute.Loader(chute.open(packed), **kwargs))
    c = collect(chute.Loader(str(packed), **kwargs))  # a path: recognised as packed
    assert all(torch.equal(xb, xc) for (xb, _), (xc, _) in zip(b, c))
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_parts_then_merge_equal_a_single_pack(folder, packed, tmp_path):
    for part in (1, 0, 2):
        chute.pack(folder, tmp_path, shard_size="100KB", part=part, parts=3)
    with pytest.raises(FileNotFoundError, match="merge"):
        chute.open(tmp_path)
    summary = chute.packed.merge(tmp_path)
    assert summary.samples == 36
    whole, merged = chute.open(packed), chute.open(tmp_path)
    assert [whole[i] for i in range(36)] == [merged[i] for i in range(36)]
    assert merged.samples == whole.samples


def test_file_list_packs_and_loads(folder, tmp_path):
    source = chute.ImageFolder(folder)
    lines = [f"{os.path.relpath(p, tmp_path)} {label}" for p, label in source.samples]
    (tmp_path / "list.txt").write_text("# path label\n" + "\n".join(lines) + "\n")
    listed = chute.FileList(tmp_path / "list.txt")
    assert listed.targets == source.targets
    loaded = torch.cat([y for _, y in chute.Loader(listed, batch_size=8, transforms=[chute.CenterCrop(16)])])
    assert loaded.tolist() == source.targets
    chute.pack(tmp_path / "list.txt", tmp_path / "out")
    ds = chute.open(tmp_path / "out")
    assert ds[5][0] == Path(source.samples[5][0]).read_bytes()
    (tmp_path / "bad.txt").write_text("a.jpg cat\n")
    with pytest.raises(ValueError, match=r"bad.txt:1: expected"):
        chute.FileList(tmp_path / "bad.txt")


def write_webdataset(folder: Path, out: Path, per_tar: int) -> list[Path]:
    """The folder as WebDataset shards: <key>.jpg + <key>.cls, per_tar samples per tar."""
    source = chute.ImageFolder(folder)
    tars = []
    for start in range(0, len(source), per_tar):
        path = out / f"train-{start // per_tar:04d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(start, min(start + per_tar, len(source))):
                file, label = source.samples[i]
                for ext, data in (("jpg", Path(file).read_bytes()), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"s{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        tars.append(path)
    return tars


def test_webdataset_shards_read_directly_and_pack(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    source = chute.ImageFolder(folder)
    write_webdataset(folder, tmp_path, per_tar=10)
    ds = chute.open(str(tmp_path / "train-*.tar"))
    assert isinstance(ds, chute.TarDataset) and len(ds) == 36
    assert ds.targets == source.targets
    for i in (0, 17, 35):
        assert ds[i][0] == Path(source.samples[i][0]).read_bytes()
    # Indexed on first open, into the cache directory: nothing is written beside the tars.
    assert not list(tmp_path.glob("*.chidx"))
    assert len(list((tmp_path / "cache" / "tar-index").glob("*.chidx"))) == 4
    kwargs = dict(batch_size=9, transforms=[chute.CenterCrop(32)])
    for (xa, _), (xb, _) in zip(chute.Loader(source, **kwargs), chute.Loader(chute.open(tmp_path), **kwargs)):
        assert torch.equal(xa, xb)
    chute.pack(str(tmp_path / "train-*.tar"), tmp_path / "packed")
    repacked = chute.open(tmp_path / "packed")
    assert repacked.targets == source.targets and repacked.samples[3][0] == "s000003.jpg"
    assert repacked[20][0] == Path(source.samples[20][0]).read_bytes()


def test_many_openers_of_a_new_tar_all_get_a_sound_index(folder, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    (tmp_path / "data").mkdir()
    tar = write_webdataset(folder, tmp_path / "data", per_tar=100)[0]
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(6) as pool:
        opened = list(pool.map(lambda _: chute.open(tar, cache_dir=cache), range(12)))
    assert all(d.targets == opened[0].targets and len(d) == 36 for d in opened)
    assert sorted(p.name for p in tar.parent.iterdir()) == [tar.name]
    assert len(list((cache / "tar-index").iterdir())) == 1  # one index, no temporary left
    assert chute.open(tar)[7] == opened[3][7]


def test_plain_tar_of_an_image_folder_keeps_its_classes(folder, tmp_path, capsys):
    source = chute.ImageFolder(folder)
    with tarfile.open(tmp_path / "plain.tar", "w") as tar:
        for path, _ in source.samples:
            tar.add(path, arcname=os.path.relpath(path, folder.parent))
    assert cli_main(["index", str(tmp_path / "plain.tar")]) == 0
    assert "plain.tar.chidx" in capsys.readouterr().out
    ds = chute.open(tmp_path / "plain.tar")
    assert ds.classes == source.classes and ds.targets == source.targets
    chute.pack(tmp_path / "plain.tar", tmp_path / "out")
    repacked = chute.open(tmp_path / "out")
    assert repacked.classes == source.classes
    assert [repacked[i][0] for i in range(len(source))] == [Path(p).read_bytes() for p, _ in source.samples]


def test_cli_pack_inspect_and_verify_name_the_bad_record(folder, tmp_path, capsys):
    dst = tmp_path / "ds"
    assert cli_main(["pack", str(folder), str(dst), "--shard-size", "200KB", "--threads", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 36 and summary["mb_per_s"] > 0
    assert cli_main(["inspect", str(dst), "--json", "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["samples"] == 36 and info["classes"] == 3 and info["format_version"] == 2  # written by this chute
    assert info["verified"]["bad"] == []
    sizes = [len(Path(p).read_bytes()) for p, _ in chute.ImageFolder(folder).samples]
    assert info["image_bytes"]["min"] == min(sizes) and info["image_bytes"]["max"] == max(sizes)
    # Damage record 30's image in its shard: --verify names it, with its shard.
    ds = chute.open(dst)
    data, _ = ds[30]
    shard = next(p for p in dst.glob("*.chute") if data in p.read_bytes())
    del ds
    raw = bytearray(shard.read_bytes())
    raw[raw.find(data) + 100] ^= 0xFF
    shard.write_bytes(bytes(raw))
    assert cli_main(["inspect", str(dst), "--json", "--verify"]) == 1
    bad = json.loads(capsys.readouterr().out)["verified"]["bad"]
    assert [b["index"] for b in bad] == [30]
    assert str(shard) in bad[0]["error"] and "record 30" in bad[0]["error"] and "checksum mismatch" in bad[0]["error"]


def test_a_corrupt_record_fails_its_sample_in_the_loader(folder, tmp_path):
    dst = tmp_path / "ds"
    chute.pack(folder, dst)
    data, _ = chute.open(dst)[4]
    shard = dst / "shard-00000.chute"
    raw = bytearray(shard.read_bytes())
    raw[raw.find(data) + 500] ^= 0x01
    shard.write_bytes(bytes(raw))
    with pytest.raises(chute.SampleError, match=r"shard .*shard-00000.chute, record 4 .*checksum mismatch") as e:
        list(chute.Loader(chute.open(dst), batch_size=4, transforms=[chute.CenterCrop(16)]))
    assert e.value.index == 4
    # The message shows two different values: the checksum stored in the record and the one computed.
    found = re.search(r"checksum mismatch: stored (0x[0-9a-f]{16}), computed (0x[0-9a-f]{16})", str(e.value))
    assert found, str(e.value)
    stored, computed = found.groups()
    assert stored != computed
    skipped = chute.Loader(chute.open(dst), batch_size=4, transforms=[chute.CenterCrop(16)], on_error="skip")
    assert sum(len(y) for _, y in skipped) == 35 and [err.index for err in skipped.errors()] == [4]


def test_damaged_datasets_give_clear_errors(folder, tmp_path):
    dst = tmp_path / "ds"
    chute.pack(folder, dst, shard_size="150KB")
    shard = dst / "shard-00001.chute"
    good = shard.read_bytes()
    shard.write_bytes(good[:-1000])
    with pytest.raises(RuntimeError, match=r"shard-00001.chute: .* \(truncated\)"):
        chute.open(dst)
    shard.write_bytes(b"NOTCHUTE" + good[8:])
    with pytest.raises(RuntimeError, match=r"shard-00001.chute: not a chute shard \(wrong magic\)"):
        chute.open(dst)
    shard.write_bytes(good)
    index = dst / "index.chidx"
    raw = bytearray(index.read_bytes())
    raw[16:20] = struct.pack("<I", 7)  # a future format version (checksum fixed below)
    raw[8:16] = struct.pack("<Q", _native.checksum(bytes(raw[16:])))
    index.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="format version 7 was written by a newer chute"):
        chute.open(dst)
    index.unlink()
    with pytest.raises(FileNotFoundError, match="not a complete chute dataset"):
        chute.open(dst)


def test_interrupted_pack_leaves_nothing_that_opens(folder, tmp_path):
    dst = tmp_path / "ds"

    def interrupt(samples, nbytes, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        chute.pack(folder, dst, progress=interrupt)
    assert list(dst.iterdir()) == []
    # A packer killed outright (SIGKILL) leaves only temporary files, and no index. The list repeats the
    # folder's files 200 times (7,200 samples, one thread), so the packer is still writing when its first
    # progress report (after about 100 ms) kills it.
    files = sorted(folder.glob("*/*.jpg"))
    (tmp_path / "list.txt").write_text("".join(f"{p} 0\n" for p in files) * 200)
    code = (
        "import chute, os, signal\n"
        f"chute.pack({str(tmp_path / 'list.txt')!r}, {str(dst)!r}, shard_size='4MB', num_threads=1, "
        "progress=lambda s, b, t: os.kill(os.getpid(), signal.SIGKILL) if 10 <= s < t else None)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert not (dst / "index.chidx").exists()
    # Temporary names are the attempt's own (<shard>.tmp-<pid>-<random>), so that two attempts never share one;
    # beside them, the destination's lock file, which the kernel unlocked when the packer died.
    left = [p.name for p in dst.iterdir() if p.name != ".chute-pack.lock"]
    assert len(left) > 1 and all(".tmp-" in name for name in left)
    with pytest.raises(FileNotFoundError, match="interrupted"):
        chute.open(dst)
    chute.pack(folder, dst)  # a rerun removes the leftovers, then writes its own files
    assert len(chute.open(dst)) == 36
    assert not [p.name for p in dst.iterdir() if ".tmp-" in p.name or p.name == ".chute-pack.lock"]


def test_open_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        chute.open(str(tmp_path / "*.tar"))
    with pytest.raises(FileNotFoundError, match="index.chidx is missing"):
        chute.open(tmp_path)
    (tmp_path / "junk.tar").write_bytes(b"not a tar" * 100)
    with pytest.raises(RuntimeError, match=r"junk.tar: member header at offset 0: bad header checksum"):
        chute.open(tmp_path / "junk.tar")


def test_pack_refuses_bad_arguments(folder, packed, tmp_path):
    with pytest.raises(ValueError, match="already holds a packed dataset"):
        chute.pack(folder, packed)
    with pytest.raises(ValueError, match="part must be in"):
        chute.pack(folder, tmp_path / "x", part=3, parts=3)
    with pytest.raises(ValueError, match="not a size"):
        chute.pack(folder, tmp_path / "x", shard_size="lots")
    assert chute.packed.parse_size("1GB") == 10**9 and chute.packed.parse_size("256MiB") == 256 * 2**20
