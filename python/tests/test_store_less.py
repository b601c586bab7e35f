"""``chute pack`` storing less: resized, re-encoded and raw records, what the index says of them, the
loader reading raw records with no decode, old packs, and ``chute inspect``'s comparison with the source."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import natural_image
from PIL import Image

import chute
from chute import _native, inspection
from chute.cli import main as cli_main

PIPELINES = {
    "train": [chute.RandomResizedCrop(48), chute.RandomHorizontalFlip()],
    "eval": [chute.Resize(40), chute.CenterCrop(32)],
}


def collect(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.fixture(scope="module")
def png_folder(tmp_path_factory) -> Path:
    """2 classes x 8 lossless PNGs of varied sizes, landscape and portrait, one grayscale."""
    root = tmp_path_factory.mktemp("pngs")
    rng = np.random.default_rng(5)
    for k in range(16):
        w, h = int(rng.integers(60, 140)), int(rng.integers(50, 120))
        img = natural_image(rng, *((h, w) if k % 3 == 0 else (w, h)))
        if k == 7:
            img = img.convert("L")
        d = root / f"c{k % 2}"
        d.mkdir(exist_ok=True)
        img.save(d / f"{k:02d}.png")
    return root


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_raw_records_give_the_batches_of_the_same_images_stored_as_png(png_folder, tmp_path, pipeline):
    chute.pack(png_folder, tmp_path / "png")  # PNG records, kept as they are
    chute.pack(png_folder, tmp_path / "raw", raw=True)
    chute.pack(png_folder, tmp_path / "plain", raw=True, raw_compression="none")
    chute.pack(png_folder, tmp_path / "mixed", raw_below=90 * 80)  # the smaller images raw, the rest PNG
    kinds = inspection.describe(chute.open(tmp_path / "mixed"))["records"]
    assert set(kinds) == {"png", "raw-zstd"} and min(kinds.values()) >= 3, kinds
    assert inspection.describe(chute.open(tmp_path / "raw"))["records"] == {"raw-zstd": 16}
    assert inspection.describe(chute.open(tmp_path / "plain"))["records"] == {"raw": 16}
    kwargs = dict(batch_size=5, shuffle=True, seed=11, transforms=PIPELINES[pipeline])
    want = collect(chute.Loader(chute.open(tmp_path / "png"), **kwargs))
    for name in ("raw", "plain", "mixed"):
        got = collect(chute.Loader(chute.open(tmp_path / name), **kwargs))
        assert len(got) == len(want)
        for (xa, ya), (xb, yb) in zip(want, got):
            assert torch.equal(xa, xb) and torch.equal(ya, yb), name
    # And the whole image, validate='full' decoding every pixel, gives the same batches too.
    full = collect(chute.Loader(chute.open(tmp_path / "raw"), validate="full", **kwargs))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(want, full))


def pil_resized(path: Path, size: tuple[int, int]) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB").resize(size, Image.BILINEAR), dtype=np.int32)


def stored_pixels(ds, i: int) -> np.ndarray:
    rgb, w, h = _native.decode_rgb(ds[i][0])
    return np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3).astype(np.int32)


def test_max_side_resizes_as_pil_bilinear(folder, tmp_path):
    # Raw records hold the resize itself: equal to PIL's, every pixel. Re-encoded JPEGs (quality 95,
    # 4:4:4) are within JPEG's loss of it: mean error under 1.5 levels, PSNR over 35 dB.
    chute.pack(folder, tmp_path / "raw", max_side=100, raw=True)
    chute.pack(folder, tmp_path / "jpeg", max_side=100, quality=95, subsampling="444")
    chute.pack(folder, tmp_path / "short", max_shorter_side=100, raw=True)
    source = chute.ImageFolder(folder)
    raw, jpeg, short = (chute.open(tmp_path / n) for n in ("raw", "jpeg", "short"))
    assert inspection.describe(jpeg)["records"] == {"jpeg-reencoded": 36}
    _, widths, heights, source_bytes = raw._native.records()
    for i, (path, _) in enumerate(source.samples):
        with Image.open(path) as im:
            w, h = im.size
        # torchvision's rules: longer side 100, shorter int(100 * s / l); or shorter 100, longer int(100 * l / s)
        want = (100, int(100 * h / w)) if w >= h else (int(100 * w / h), 100)
        assert (widths[i], heights[i]) == want
        assert source_bytes[i] == Path(path).stat().st_size
        ref = pil_resized(Path(path), want)
        assert np.array_equal(stored_pixels(raw, i), ref), path
        # The re-encode is PIL's save(quality=95, subsampling=0 (4:4:4)) of that resize, decoded: exactly.
        buf = io.BytesIO()
        Image.fromarray(ref.astype(np.uint8)).save(buf, format="JPEG", quality=95, subsampling=0)
        pil_jpeg = np.asarray(Image.open(buf).convert("RGB"), dtype=np.int32)
        assert np.array_equal(stored_pixels(jpeg, i), pil_jpeg), path
        diff = stored_pixels(jpeg, i) - ref  # these noisy test images lose ~2 levels on average to JPEG
        assert np.abs(diff).mean() < 3 and 10 * np.log10(255**2 / (diff**2).mean()) > 35, path
        s_want = (int(100 * w / h), 100) if w >= h else (100, int(100 * h / w))
        assert np.array_equal(stored_pixels(short, i), pil_resized(Path(path), s_want)), path


def test_images_within_the_cap_keep_their_bytes_unless_asked(folder, tmp_path):
    source = chute.ImageFolder(folder)
    summary = chute.pack(folder, tmp_path / "keep", max_side=10_000)
    kept = chute.open(tmp_path / "keep")
    assert summary.source_bytes == summary.payload_bytes
    assert all(kept[i][0] == Path(p).read_bytes() for i, (p, _) in enumerate(source.samples))
    assert inspection.describe(kept)["records"] == {"jpeg": 36}
    chute.pack(folder, tmp_path / "again", keep_original=False, quality=75)
    again = chute.open(tmp_path / "again")
    assert inspection.describe(again)["records"] == {"jpeg-reencoded": 36}
    with pytest.raises(ValueError, match="re-encodes nothing"):
        chute.pack(folder, tmp_path / "x", quality=80)
    with pytest.raises(ValueError, match="not both"):
        chute.pack(folder, tmp_path / "x", max_side=10, max_shorter_side=10)
    with pytest.raises(ValueError, match="raw_compression applies to raw records"):
        chute.pack(folder, tmp_path / "x", raw_compression="none")
    with pytest.raises(ValueError, match="needs validate"):
        chute.pack(folder, tmp_path / "x", raw=True, validate="none")
    with pytest.raises(ValueError, match="subsampling"):
        chute.pack(folder, tmp_path / "x", max_side=10, subsampling="422")


def test_a_corrupt_raw_record_is_a_sample_error_naming_it(png_folder, tmp_path):
    dst = tmp_path / "raw"
    chute.pack(png_folder, dst, raw=True)
    ds = chute.open(dst)
    payload, key = ds[3][0], ds.samples[3][0]
    shard = dst / "shard-00000.chute"
    data = bytearray(shard.read_bytes())
    at = data.find(payload)
    # The zstd frame damaged (a reserved bit of its header set): the record checksum catches it; unchecked,
    # the raw decoder does. (Damage inside a stored block is pixels zstd cannot tell from others: only the
    # record checksum, on by default, catches that.)
    data[at + 32 + 4] |= 0x08
    shard.write_bytes(bytes(data))
    with pytest.raises(chute.SampleError, match=r"record 3 .*checksum mismatch") as e:
        list(chute.Loader(chute.open(dst), batch_size=4, transforms=[chute.CenterCrop(16)]))
    assert e.value.index == 3
    with pytest.raises(chute.SampleError, match=rf"sample 3 \({key}\): .*raw image: .*zstd") as e:
        list(chute.Loader(chute.open(dst, verify=False), batch_size=4, transforms=[chute.CenterCrop(16)]))
    assert e.value.index == 3 and e.value.path == key
    # A header that disagrees with its pixels: the size is named.
    data[at : at + len(payload)] = payload
    data[at + 8 : at + 12] = struct.pack("<I", struct.unpack("<I", payload[8:12])[0] + 1)
    shard.write_bytes(bytes(data))
    with pytest.raises(chute.SampleError, match=rf"sample 3 \({key}\): .*pixel bytes for"):
        list(chute.Loader(chute.open(dst, verify=False), batch_size=4, transforms=[chute.CenterCrop(16)]))


def as_version1(dst: Path) -> None:
    """Rewrites the pack at ``dst`` in format version 1's layout, as the previous chute wrote it: 40-byte
    index entries (no record kind, stored size or source bytes), version 1 in every header."""
    index = bytearray((dst / "index.chidx").read_bytes())
    n, entries_off, strings_off = (struct.unpack_from("<Q", index, at)[0] for at in (32, 72, 80))
    entries = b"".join(index[entries_off + 64 * i : entries_off + 64 * i + 40] for i in range(n))
    out = bytearray(index[:entries_off]) + entries
    strings = len(out)
    out += index[strings_off:]
    struct.pack_into("<I", out, 16, 1)
    struct.pack_into("<I", out, 28, 40)
    struct.pack_into("<Q", out, 80, strings)
    struct.pack_into("<Q", out, 8, _native.checksum(bytes(out[16:])))
    (dst / "index.chidx").write_bytes(bytes(out))
    for shard in dst.glob("*.chute"):
        data = bytearray(shard.read_bytes())
        struct.pack_into("<I", data, 16, 1)
        struct.pack_into("<Q", data, 8, _native.checksum(bytes(data[16:64])))
        shard.write_bytes(bytes(data))


def test_a_version_1_pack_still_loads(folder, tmp_path):
    chute.pack(folder, tmp_path / "new")
    chute.pack(folder, tmp_path / "old")
    as_version1(tmp_path / "old")
    old = chute.open(tmp_path / "old")
    info = inspection.describe(old)
    assert info["format_version"] == 1 and info["records"] == {"unknown": 36}
    assert info["source_bytes"] == info["payload_bytes"]
    kwargs = dict(batch_size=6, shuffle=True, seed=2, transforms=PIPELINES["train"])
    want = collect(chute.Loader(chute.open(tmp_path / "new"), **kwargs))
    got = collect(chute.Loader(old, **kwargs))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(want, got))
    assert inspection.verify(old) == []


def test_cli_pack_flags_and_inspect_report_kinds_size_and_error(folder, tmp_path, capsys):
    dst = tmp_path / "small"
    assert (
        cli_main(
            [
                "pack",
                str(folder),
                str(dst),
                "--max-side",
                "120",
                "--quality",
                "85",
                "--subsampling",
                "420",
                "--keep-original",
                "--raw-below",
                "8000",
                "--raw-compression",
                "zstd",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["payload_bytes"] < summary["source_bytes"]
    assert cli_main(["inspect", str(dst), "--compare", str(folder), "--sample", "12", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format_version"] == chute.packed.FORMAT_VERSION == 2
    assert sum(info["records"].values()) == 36 and set(info["records"]) <= {"jpeg-reencoded", "raw-zstd"}
    assert info["size_ratio"] == pytest.approx(summary["payload_bytes"] / summary["source_bytes"])
    c = info["compared"]
    assert c["records"] == 12 and 28 < c["psnr_db"] < 60 and c["min_psnr_db"] <= c["psnr_db"]
    # The figures, recomputed here from the records compared and their sources.
    ds, by_key = chute.open(dst), {str(Path(p).relative_to(folder)): p for p, _ in chute.ImageFolder(folder).samples}
    diffs = []
    for i in c["indices"]:
        stored = stored_pixels(ds, i)
        diffs.append((stored - pil_resized(Path(by_key[ds.samples[i][0]]), stored.shape[1::-1])).ravel())
    diff = np.concatenate(diffs)
    assert c["psnr_db"] == pytest.approx(10 * np.log10(255**2 / (diff**2).mean()))
    assert c["mean_abs_error"] == pytest.approx(np.abs(diff).mean()) and c["max_error"] == np.abs(diff).max() > 0
    # An unchanged pack compares identical.
    assert cli_main(["pack", str(folder), str(tmp_path / "same")]) == 0
    capsys.readouterr()
    assert cli_main(["inspect", str(tmp_path / "same"), "--compare", str(folder), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["compared"]["psnr_db"] is None and same["compared"]["max_error"] == 0
    assert cli_main(["inspect", str(dst), "--compare", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "jpeg-reencoded" in text and "vs source" in text and "PSNR" in text
    with pytest.raises(SystemExit):  # argparse: not allowed together
        cli_main(["pack", str(folder), str(tmp_path / "x"), "--max-side", "5", "--max-shorter-side", "5"])
    assert "not allowed with argument --max-side" in capsys.readouterr().err


def test_raw_and_reencoded_records_keep_the_exif_orientation(tmp_path):
    # Stored pixels stay as the source stored them, with its orientation recorded: apply_exif_orientation
    # turns a raw record exactly as it turns the source JPEG, and a re-encoded one the same way.
    rng = np.random.default_rng(3)
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for k, orientation in enumerate((1, 3, 6, 8)):
        exif = Image.Exif()
        exif[0x0112] = orientation
        natural_image(rng, 90, 60).save(src / "a" / f"{k}.jpg", quality=92, exif=exif.tobytes())
    chute.pack(src, tmp_path / "raw", raw=True)
    chute.pack(src, tmp_path / "small", max_side=45, raw=True)
    kwargs = dict(batch_size=4, transforms=[chute.Resize(40), chute.CenterCrop(32)], apply_exif_orientation=True)
    ((want, _),) = collect(chute.Loader(chute.ImageFolder(src), **kwargs))
    ((got, _),) = collect(chute.Loader(chute.open(tmp_path / "raw"), **kwargs))
    assert torch.equal(want, got)
    ((small, _),) = collect(chute.Loader(chute.open(tmp_path / "small"), **kwargs))
    assert small.shape == want.shape
    for k in range(4):  # upright: the downscaled copy is close to the original's pixels, not their rotation
        assert (small[k].float() - want[k].float()).abs().mean() < 12, k
