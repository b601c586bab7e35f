"""Damage the loader would find only in some epochs, and files it cannot decode: ``validate='full'``,
``chute pack``'s probe (``--validate``, ``--skip-bad``), ``chute inspect --verify`` and ``chute inspect DIR``."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from conftest import jpeg_bytes, make_folder, natural_image
from PIL import Image

import chute


def damaged_at_bottom(width: int = 64, height: int = 512) -> bytes:
    """A JPEG whose entropy-coded data loses its last fifth, the end-of-image marker kept: rows near the
    top decode, rows near the bottom hit the marker early ("premature end of data segment")."""
    rng = np.random.default_rng(3)
    data = jpeg_bytes(Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)), 95)
    sos = data.index(b"\xff\xda")
    scan = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")
    end = len(data) - 2
    assert data[end:] == b"\xff\xd9"
    cut = end - (end - scan) // 5
    while data[cut - 1] == 0xFF:  # not inside a stuffed FF 00
        cut -= 1
    return data[:cut] + b"\xff\xd9"


@pytest.fixture()
def bottom_damaged_folder(tmp_path):
    d = tmp_path / "damaged" / "c0"
    d.mkdir(parents=True)
    (d / "a_good.jpg").write_bytes(jpeg_bytes(natural_image(np.random.default_rng(0), 64, 512)))
    (d / "b_bad.jpg").write_bytes(damaged_at_bottom())
    return tmp_path / "damaged"


def epoch(loader) -> list:
    return [(x.clone(), y.clone()) for x, y in loader]


def test_bottom_damage_escapes_a_top_crop_by_default_and_fails_with_validate_full(bottom_damaged_folder):
    # The trade-off of the default: the crop (rows 240..271 of 512) never reaches the damage.
    crop = [chute.CenterCrop(32)]
    default = chute.Loader(chute.ImageFolder(bottom_damaged_folder), 2, transforms=crop, num_threads=1)
    assert len(epoch(default)) == 1
    full = chute.Loader(chute.ImageFolder(bottom_damaged_folder), 2, transforms=crop, num_threads=1, validate="full")
    with pytest.raises(chute.SampleError, match="b_bad.jpg") as raised:
        epoch(full)
    assert "Corrupt JPEG data" in str(raised.value)
    skip = chute.Loader(
        chute.ImageFolder(bottom_damaged_folder), 1, transforms=crop, num_threads=1, validate="full", on_error="skip"
    )
    assert len(epoch(skip)) == 1
    assert [e.index for e in skip.errors()] == [1]


@pytest.mark.parametrize(
    "options",
    [{}, {"decode": "reduced", "reducing_gap": 1.0}, {"apply_exif_orientation": True}],
    ids=["plain", "reduced", "exif"],
)
def test_validate_full_delivers_the_same_pixels(folder, options):
    tf = [chute.RandomResizedCrop(64), chute.RandomHorizontalFlip()]
    runs = []
    for validate in ("window", "full"):
        loader = chute.Loader(
            chute.ImageFolder(folder),
            8,
            shuffle=True,
            seed=5,
            transforms=tf,
            num_threads=2,
            validate=validate,
            **options,
        )
        runs.append([epoch(loader) for _ in range(2)])
    for a, b in zip(runs[0], runs[1]):
        assert len(a) == len(b)
        for (xa, ya), (xb, yb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_validate_must_be_window_or_full(folder):
    with pytest.raises(ValueError, match="validate must be 'window'"):
        chute.Loader(chute.ImageFolder(folder), 2, validate="yes")


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header announces width x height (valid chunks and CRCs, no real pixel data)."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def pil_bytes(fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    natural_image(np.random.default_rng(1), 40, 30).save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.fixture()
def mixed_folder(tmp_path):
    """3 good JPEGs, then files an extension check lets through but the loader cannot decode, and one JPEG
    damaged below its header."""
    root = tmp_path / "mixed"
    make_folder(root, 1, 3)
    d = root / "class_0"
    (d / "t_text.jpg").write_text("this is not an image\n")
    (d / "u_random.png").write_bytes(np.random.default_rng(2).bytes(3000))
    (d / "v_bmp.jpg").write_bytes(pil_bytes("BMP"))
    (d / "w_tiff.png").write_bytes(pil_bytes("TIFF"))
    (d / "x_huge.png").write_bytes(png_header_only(50_000, 50_000))
    (d / "y_damaged.jpg").write_bytes(damaged_at_bottom())
    return root


UNDECODABLE = ["t_text.jpg", "u_random.png", "v_bmp.jpg", "w_tiff.png", "x_huge.png"]


def test_pack_refuses_a_file_the_loader_cannot_decode_naming_it(mixed_folder, tmp_path):
    with pytest.raises(ValueError, match=r"sample 3 \(.*t_text.jpg\): .*skip-bad"):
        chute.pack(mixed_folder, tmp_path / "out")
    assert not (tmp_path / "out" / "index.chidx").exists()


@pytest.mark.parametrize("validate", ["header", "full"])
def test_pack_skip_bad_leaves_out_and_lists_what_the_loader_would_refuse(mixed_folder, tmp_path, validate):
    summary = chute.pack(mixed_folder, tmp_path / "out", skip_bad=True, validate=validate, num_threads=2)
    expected = UNDECODABLE + (["y_damaged.jpg"] if validate == "full" else [])
    assert [p.rsplit("/", 1)[1] for _, p, _ in summary.skipped] == expected
    assert [i for i, _, _ in summary.skipped] == list(range(3, 3 + len(expected)))
    reasons = dict((p.rsplit("/", 1)[1], r) for _, p, r in summary.skipped)
    assert "not a JPEG, PNG or WebP" in reasons["t_text.jpg"] and "BMP images are not supported" in reasons["v_bmp.jpg"]
    assert "TIFF" in reasons["w_tiff.png"] and "max_pixels" in reasons["x_huge.png"]
    ds = chute.open(tmp_path / "out")
    assert summary.samples == len(ds) == 9 - len(expected)
    assert [k.rsplit("/", 1)[1] for k, _ in ds.samples][3:] == (["y_damaged.jpg"] if validate == "header" else [])
    # What was packed is what the loader reads (the damaged file only fails a crop that reaches it).
    loader = chute.Loader(ds, 2, transforms=[chute.CenterCrop(24)], num_threads=1)
    assert sum(len(y) for _, y in loader) == len(ds)


def test_cli_pack_skip_bad_reports_and_inspect_verify_decodes_every_record(mixed_folder, tmp_path, capsys, monkeypatch):
    from chute.cli import main as cli_main

    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps long paths otherwise
    dst = tmp_path / "out"
    assert cli_main(["pack", str(mixed_folder), str(dst)]) == 2
    assert "sample 3 (" + str(mixed_folder / "class_0" / "t_text.jpg") in capsys.readouterr().out
    # Every image is over a cap of 1000 pixels: nothing is left to pack, and the error says why.
    assert cli_main(["pack", str(mixed_folder), str(tmp_path / "small"), "--skip-bad", "--max-pixels", "1000"]) == 2
    out = capsys.readouterr().out
    assert "nothing to pack: all 9 samples failed the image check" in out and "max_pixels" in out
    assert cli_main(["pack", str(mixed_folder), str(dst), "--skip-bad", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 4 and [s["index"] for s in summary["skipped"]] == [3, 4, 5, 6, 7]
    # Checksums are all right, but record 3 does not decode whole: --verify names it.
    assert cli_main(["inspect", str(dst), "--verify", "--json"]) == 1
    bad = json.loads(capsys.readouterr().out)["verified"]["bad"]
    assert [b["index"] for b in bad] == [3]
    assert "y_damaged.jpg" in bad[0]["error"] and "Corrupt JPEG data" in bad[0]["error"]
    assert cli_main(["inspect", str(dst), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "checksummed and decoded 4 records" in out and "1 bad" in out


def test_inspect_verify_decodes_tar_members(mixed_folder, tmp_path, capsys):
    import tarfile

    from chute.cli import main as cli_main

    tar_path = tmp_path / "shards" / "a.tar"
    tar_path.parent.mkdir()
    with tarfile.open(tar_path, "w") as tar:
        for name in ("img_000.jpg", "img_001.jpg", "y_damaged.jpg"):
            tar.add(mixed_folder / "class_0" / name, arcname=name)
    assert cli_main(["inspect", str(tar_path), "--verify", "--json"]) == 1
    bad = json.loads(capsys.readouterr().out)["verified"]["bad"]
    assert [b["index"] for b in bad] == [2] and "y_damaged.jpg" in bad[0]["error"]


def test_inspect_on_an_image_folder_says_what_it_is(folder, mixed_folder, capsys, monkeypatch):
    from chute.cli import main as cli_main

    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps long paths otherwise
    assert cli_main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "an image folder, not a pack: 36 images in 3 classes" in out and "interrupted" not in out
    assert cli_main(["inspect", str(mixed_folder), "--verify", "--json"]) == 1
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "image folder" and info["samples"] == 9 and info["classes"] == 1
    assert [b["index"] for b in info["verified"]["bad"]] == [3, 4, 5, 6, 7, 8]
