"""Sources read what the user meant: an ambiguous directory is an error, a tar gives the samples of the tree
it was made from (links and several dots included), tar indexes are cached apart from the data and never
reused for a rewritten tar, labels that do not fit are errors, and names that are not UTF-8 survive."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch

import chute
from chute.cli import main as cli_main


def _count(loader) -> int:
    return sum(len(y) for _, y in loader)


def test_file_list_label_that_overflows_is_an_error_naming_the_line(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "list.txt").write_text("a.jpg 1\na.jpg 99999999999999999999999\n")
    with pytest.raises(ValueError, match=r"list.txt:2: label 99999999999999999999999 is out of range"):
        chute.FileList(tmp_path / "list.txt")
    (tmp_path / "neg.txt").write_text("a.jpg -99999999999999999999999\n")
    with pytest.raises(ValueError, match=r"neg.txt:1: label .* is out of range"):
        chute.FileList(tmp_path / "neg.txt")


def test_file_list_path_with_a_nul_byte_is_an_error_naming_the_line(tmp_path):
    (tmp_path / "img000.jpg").write_bytes(b"x")  # what the path cut short at its NUL would read
    (tmp_path / "list.txt").write_bytes(b"img000.jpg 0\nimg000.jpg\0junk 0\n")
    with pytest.raises(ValueError, match=r"list.txt:2: a NUL byte at column 11 \(a path cannot hold one\)"):
        chute.FileList(tmp_path / "list.txt")


def test_a_stray_tar_in_an_image_folder_root_is_an_error_naming_both_readings(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "root"
    shutil.copytree(folder, root)
    with tarfile.open(root / "stray.tar", "w") as tar:  # a WebDataset shard of 2 samples
        for i in range(2):
            for ext, data in (("jpg", (folder / "class_0" / f"img_{i:03d}.jpg").read_bytes()), ("cls", b"0")):
                info = tarfile.TarInfo(f"s{i}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(ValueError) as e:
        chute.Loader(str(root), batch_size=4, transforms=[chute.CenterCrop(16)])
    message = str(e.value)
    assert "ambiguous" in message and "stray.tar" in message and "class_0" in message
    assert f"chute.ImageFolder({str(root)!r})" in message and f"chute.open({str(root)!r})" in message
    with pytest.raises(ValueError, match="ambiguous"):
        chute.pack(root, tmp_path / "packed")
    assert sorted(p.name for p in root.iterdir()) == before  # nothing written into the dataset
    # Each reading, asked for by name.
    assert _count(chute.Loader(chute.ImageFolder(root), batch_size=8, transforms=[chute.CenterCrop(16)])) == 36
    assert len(chute.open(root)) == 2
    assert sorted(p.name for p in root.iterdir()) == before
    # A directory with only tars, or only class folders, is not ambiguous.
    only_tars = tmp_path / "only_tars"
    only_tars.mkdir()
    shutil.copy(root / "stray.tar", only_tars)
    crop = [chute.CenterCrop(16)]
    assert isinstance(chute.Loader(str(only_tars), transforms=crop).source, chute.TarDataset)
    assert isinstance(chute.Loader(str(folder), transforms=crop).source, chute.ImageFolder)
    named_like_a_tar = tmp_path / "dirs"
    shutil.copytree(folder / "class_0", named_like_a_tar / "x.tar")
    assert len(chute.Loader(str(named_like_a_tar), transforms=crop).source) == 12


def _tree_with_links(root: Path, folder: Path) -> None:
    """An ImageFolder tree with names with several dots, a hard link, links to a file and to a directory."""
    images = sorted((folder / "class_0").iterdir())
    (root / "cat").mkdir(parents=True)
    (root / "dog" / "sub").mkdir(parents=True)
    shutil.copy(images[0], root / "cat" / "img.0.jpg")
    shutil.copy(images[1], root / "cat" / "img.1.jpg")
    shutil.copy(images[2], root / "dog" / "a.b.c.JPG")
    shutil.copy(images[3], root / "dog" / "sub" / "deep.png.jpg")
    os.link(root / "cat" / "img.0.jpg", root / "dog" / "hard.jpg")
    os.symlink("../cat/img.1.jpg", root / "dog" / "soft.jpg")
    os.symlink("cat", root / "tiger")  # a class that is a link to another class's folder
    (root / "cat" / "notes.txt").write_text("not an image")


def test_a_tree_and_its_gnu_tar_give_the_same_samples(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "tree"
    _tree_with_links(root, folder)
    subprocess.run(["tar", "-cf", str(tmp_path / "tree.tar"), "-C", str(root), "."], check=True)
    with tarfile.open(tmp_path / "tree.tar") as t:  # GNU tar kept the links as links
        kinds = {m.name: m for m in t.getmembers()}
        assert kinds["./dog/soft.jpg"].issym() and kinds["./tiger"].issym()
        assert kinds["./dog/hard.jpg"].islnk() or kinds["./cat/img.0.jpg"].islnk()
    tree = chute.ImageFolder(root)
    tar = chute.open(tmp_path / "tree.tar")
    assert len(tree) == 8 and len(tar) == len(tree)
    assert tar.classes == tree.classes == ["cat", "dog", "tiger"]

    tree_items = sorted((label, Path(p).read_bytes()) for p, label in tree.samples)
    tar_items = sorted((tar[i][1], tar[i][0]) for i in range(len(tar)))
    assert tar_items == tree_items
    # Archived with its top directory, the tree gives the same samples and classes.
    subprocess.run(["tar", "-cf", str(tmp_path / "named.tar"), "-C", str(tmp_path), "tree"], check=True)
    named = chute.open(tmp_path / "named.tar")
    assert named.classes == tree.classes and sorted(named.targets) == sorted(tree.targets)
    # The text file is reported, not silently dropped.
    skipped = {s["reason"]: s for s in tar.skipped}
    assert skipped["not an image file"]["count"] == 2  # cat/notes.txt, and again as tiger/notes.txt
    stats = chute.Loader(tar, batch_size=5, transforms=[chute.CenterCrop(16)])
    assert _count(stats) == 8
    assert stats.stats()["members_skipped"] == {"not an image file": 2}


def test_inspect_lists_skipped_members(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "tree"
    _tree_with_links(root, folder)
    os.symlink("/etc/hostname", root / "cat" / "outside.jpg")
    subprocess.run(["tar", "-cf", str(tmp_path / "tree.tar"), "-C", str(root), "."], check=True)
    assert cli_main(["inspect", str(tmp_path / "tree.tar"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    reasons = {s["reason"]: s for s in info["skipped"]}
    assert reasons["symbolic link pointing outside the archive"]["examples"] == [
        f"{tmp_path / 'tree.tar'}:cat/outside.jpg"
    ]
    assert cli_main(["inspect", str(tmp_path / "tree.tar")]) == 0
    assert "symbolic link pointing outside the archive" in capsys.readouterr().out


def _labelled_tar(path: Path, image: bytes, labels: tuple[int, int]) -> None:
    with tarfile.open(path, "w") as tar:
        for i, label in enumerate(labels):
            for ext, data in (("jpg", image), ("cls", str(label).encode())):
                info = tarfile.TarInfo(f"s{i}.{ext}")
                info.size, info.mtime = len(data), 1_000_000
                tar.addfile(info, io.BytesIO(data))


def test_a_tar_rewritten_with_the_same_size_and_mtime_is_reindexed(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "shard.tar"
    image = (folder / "class_0" / "img_000.jpg").read_bytes()
    _labelled_tar(path, image, (1, 2))
    stat = path.stat()
    assert chute.open(path).targets == [1, 2]
    assert os.listdir(tmp_path / "data") == ["shard.tar"]  # the index went to the cache directory
    _labelled_tar(path, image, (3, 4))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert chute.open(path).targets == [3, 4]
    # An explicit cache directory wins over the environment.
    chute.open(path, cache_dir=tmp_path / "elsewhere")
    assert len(list((tmp_path / "elsewhere" / "tar-index").iterdir())) == 1


def test_names_that_are_not_utf8_are_carried_as_fsdecoded_str(folder, tmp_path):
    root = os.fsencode(tmp_path / "tree")
    good = (folder / "class_0" / "img_000.jpg").read_bytes()
    for cls in (b"caf\xe9", b"plain"):  # a Latin-1 class name
        os.makedirs(os.path.join(root, cls))
        for name in (b"ok.jpg", b"\xff\xfe.jpg"):
            with open(os.path.join(root, cls, name), "wb") as f:
                f.write(good)
    with open(os.path.join(root, b"plain", b"bad\xff.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    source = chute.ImageFolder(os.fsdecode(root))
    assert source.classes == [os.fsdecode(b"caf\xe9"), "plain"]
    paths = [p for p, _ in source.samples]
    assert len(paths) == 5 and all(os.path.exists(p) for p in paths)
    assert os.fsencode(paths[0]) == os.path.join(root, b"caf\xe9", b"ok.jpg")
    assert chute.ImageFolder(root).classes == source.classes  # bytes paths are accepted too

    quarantine = tmp_path / "bad.jsonl"
    loader = chute.Loader(
        source, batch_size=2, on_error="skip", quarantine=quarantine, transforms=[chute.CenterCrop(16)]
    )
    assert _count(loader) == 4
    [error] = loader.errors()
    assert os.fsencode(error.path) == os.path.join(root, b"plain", b"bad\xff.jpg")
    [line] = quarantine.read_text(encoding="utf-8").splitlines()
    assert os.fsencode(json.loads(line)["path"]) == os.fsencode(error.path)

    raising = chute.Loader(source, batch_size=2, transforms=[chute.CenterCrop(16)])
    with pytest.raises(chute.SampleError) as e:
        _count(raising)
    assert os.fsencode(e.value.path) == os.fsencode(error.path)

    # A tar and a file list with such names, too.
    tar_path = os.path.join(os.fsencode(tmp_path), b"t\xe9.tar")
    with tarfile.open(os.fsdecode(tar_path), "w", encoding="utf-8", errors="surrogateescape") as tar:
        tar.add(os.fsdecode(root), arcname="tree")
    ds = chute.open(os.fsdecode(tar_path), cache_dir=tmp_path / "cache")
    assert len(ds) == 5 and ds.classes == source.classes
    assert all(os.fsencode(name).startswith(tar_path) for name, _ in ds.samples)
    listed = os.path.join(os.fsencode(tmp_path), b"list.txt")
    with open(listed, "wb") as f:
        f.write(os.path.join(root, b"caf\xe9", b"\xff\xfe.jpg") + b" 7\n")
    files = chute.FileList(os.fsdecode(listed))
    assert os.fsencode(files.samples[0][0]) == os.path.join(root, b"caf\xe9", b"\xff\xfe.jpg")
    assert torch.equal(next(iter(chute.Loader(files, transforms=[chute.CenterCrop(16)])))[1], torch.tensor([7]))


def test_the_dataloader_fast_path_takes_names_that_are_not_utf8(tmp_path):
    from PIL import Image
    from torch.utils.data import DataLoader

    from chute.bench.pil_reference import as_torchvision
    from chute.dataloader import plan as seam

    T = as_torchvision()

    d = os.path.join(os.fsencode(tmp_path), b"c\xe9")
    os.mkdir(d)
    Image.new("RGB", (20, 20)).save(os.fsdecode(os.path.join(d, b"good\xff.jpg")))
    with open(os.path.join(d, b"zbad\xff.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    ds = T.ImageFolder(tmp_path, transform=T.Compose([T.Resize((16, 16)), T.PILToTensor()]))
    loader = DataLoader(ds, batch_size=1)
    plan = seam.choose(loader)
    assert isinstance(plan, seam.Plan), str(plan)
    try:
        base_seed = (
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
            if loader.generator is not None
            else 0
        )
        it = plan.batches(iter(loader._index_sampler), base_seed=base_seed)
        assert next(it)[0].shape == (1, 3, 16, 16)
        with pytest.raises(chute.SampleError) as e:
            next(it)
        assert os.fsencode(e.value.path) == os.path.join(d, b"zbad\xff.jpg")
    finally:
        plan.close()


def test_a_path_with_a_nul_byte_is_refused_not_cut_short(folder):
    with pytest.raises(TypeError):
        chute.ImageFolder(str(folder) + "\0ignored")
