"""Writes small seed inputs for the fuzz targets in cpp/fuzz: JPEGs of each kind (baseline, progressive,
4:4:4/4:2:2/4:2:0, grayscale, CMYK, with EXIF), PNGs (RGB, RGBA, gray, palette, 16-bit, interlaced) and
WebPs (lossy, lossless, with alpha). decode_fuzz, png_fuzz and webp_fuzz read a control byte before the
file, so their seeds get one. shard_fuzz gets
small packed datasets written by chute.pack (so the chute package must be importable: run with
.venv/bin/python), as control byte + index length + index + first shard; tar_fuzz gets tar files
(ustar, GNU long names, pax) laid out as WebDataset shards; tfrecord_fuzz, lmdb_fuzz, pickle_span_fuzz and
caffe_datum_fuzz get files and values written by those formats' tools (python/tests/support/format_writers.py).

    .venv/bin/python scripts/make_fuzz_corpus.py OUT_DIR   # OUT_DIR/{decode,png,...,tar,s3_xml,url_pattern,tfrecord,...}
"""

from __future__ import annotations

import io
import struct
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image


def images() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    out = {}

    def save(name, img, fmt, **kw):
        buf = io.BytesIO()
        img.save(buf, format=fmt, **kw)
        out[name] = buf.getvalue()

    for sub in (0, 1, 2):
        save(f"jpeg_sub{sub}.jpg", rgb, "JPEG", quality=90, subsampling=sub)
    save("jpeg_progressive.jpg", rgb, "JPEG", progressive=True)
    save("jpeg_gray.jpg", rgb.convert("L"), "JPEG")
    save("jpeg_cmyk.jpg", rgb.convert("CMYK"), "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 6
    save("jpeg_exif.jpg", rgb, "JPEG", exif=exif)
    save("png_rgb.png", rgb, "PNG")
    save("png_rgba.png", rgb.convert("RGBA"), "PNG")
    save("png_gray.png", rgb.convert("L"), "PNG")
    save("png_palette.png", rgb.convert("P"), "PNG")
    save("png_16bit.png", Image.fromarray(rng.integers(0, 65535, (24, 32), dtype=np.uint16)), "PNG")
    save("png_interlaced.png", rgb, "PNG", interlace=1)
    save("webp_lossy.webp", rgb, "WEBP", quality=80)
    save("webp_lossless.webp", rgb, "WEBP", lossless=True)
    save("webp_alpha.webp", rgb.convert("RGBA"), "WEBP", quality=80)
    return out


def packed_seeds() -> dict[str, bytes]:
    """Packed datasets of a few records (one shard, several shards, with class names), as shard_fuzz
    reads them: control byte, index length (u32 LE), index, first shard. Without an importable chute
    package there are none (a warning says so) and shard_fuzz starts from an empty corpus."""
    try:
        import chute
    except ImportError:
        print("make_fuzz_corpus: chute is not importable (run with .venv/bin/python); no shard seeds", file=sys.stderr)
        return {}

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, payload in enumerate([b"", b"\xff\xd8\xff" + bytes(range(40)), b"x" * 300, bytes(range(256)) * 4]):
            (tmp / f"s{i}.bin").write_bytes(payload)
        (tmp / "list.txt").write_text("".join(f"s{i}.bin {i - 1}\n" for i in range(4)))
        for c in ("cat", "dog"):
            (tmp / "folder" / c).mkdir(parents=True)
            (tmp / "folder" / c / "a.jpg").write_bytes(c.encode() * 20)
        cases = {
            "list_one_shard": (tmp / "list.txt", "1MB"),
            "list_small_shards": (tmp / "list.txt", "4096"),
            "folder_classes": (tmp / "folder", "1MB"),
        }
        for name, (src, shard_size) in cases.items():
            dst = tmp / f"packed_{name}"
            # The payloads are not images, on purpose: the format is what shard_fuzz reads.
            chute.pack(src, dst, shard_size=shard_size, num_threads=1, validate="none")
            index = (dst / "index.chidx").read_bytes()
            shard = sorted(dst.glob("*.chute"))[0].read_bytes()
            for control in (0x00, 0x03):
                out[f"{control:02x}_{name}"] = bytes([control]) + struct.pack("<I", len(index)) + index + shard
    return out


def tar_seeds() -> dict[str, bytes]:
    """WebDataset-style tars: image + .cls samples, in ustar, GNU (long names) and pax formats; a tree with links."""
    out = {}
    for fmt, name in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            members = [
                ("000.jpg", b"\xff\xd8" * 10),
                ("000.cls", b"3"),
                ("001.cls", b"-1\n"),
                ("001.png", b"PNG"),
                ("meta.json", b"{}"),
                ("d/" + "n" * (120 if fmt != tarfile.USTAR_FORMAT else 20) + ".webp", b"W"),
            ]
            for member, data in members:
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        out[f"{name}.tar"] = buf.getvalue()
    # An image tree with links: hard link, symbolic links to a file, to a directory, out of the archive, a loop.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member, data in (("t/a/img.0.jpg", b"\xff\xd8" * 10), ("t/a/img.1.png", b"PNG")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for member, kind, target in (
            ("t/a/hard.jpg", tarfile.LNKTYPE, "t/a/img.0.jpg"),
            ("t/a/soft.jpg", tarfile.SYMTYPE, "img.1.png"),
            ("t/b", tarfile.SYMTYPE, "a"),
            ("t/a/out.jpg", tarfile.SYMTYPE, "../../../x.jpg"),
            ("t/a/loop", tarfile.SYMTYPE, ".."),
        ):
            info = tarfile.TarInfo(member)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    out["links.tar"] = buf.getvalue()
    return out


def raw_seeds() -> dict[str, bytes]:
    """Raw-pixel payloads (raw_image.h), uncompressed and zstd, as `chute pack --raw` writes them: the
    uncompressed one built here from the layout, the zstd one packed by chute (none without chute)."""
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (12, 20, 3), dtype=np.uint8)
    header = b"CHUTEPIX" + struct.pack("<IIBBB5xQ", 20, 12, 3, 0, 1, pixels.size)
    out = {"plain.raw": header + pixels.tobytes()}
    try:
        import chute
    except ImportError:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "a").mkdir()
        Image.fromarray(pixels).save(tmp / "a" / "x.png")
        chute.pack(tmp, tmp / "raw", raw=True)
        out["zstd.raw"] = chute.open(tmp / "raw")[0][0]
    return out


def s3_xml_seeds() -> dict[str, bytes]:
    """S3 answers as ObjectStore reads them: a truncated list page with entities, the last page, an
    UploadId, a complete result and an <Error> (s3_xml_fuzz)."""
    return {
        "page.xml": b'<?xml version="1.0"?><ListBucketResult><IsTruncated>true</IsTruncated><Contents>'
        b"<Key>d/a&amp;b &#233;.tar</Key><ETag>&quot;0a&quot;</ETag><Size>10</Size></Contents>"
        b"<NextContinuationToken>tok/+=</NextContinuationToken></ListBucketResult>",
        "last.xml": b"<ListBucketResult><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated><NextContinuationToken/>"
        b"</ListBucketResult>",
        "upload.xml": b"<InitiateMultipartUploadResult><UploadId>VXA&#x2F;</UploadId></InitiateMultipartUploadResult>",
        "complete.xml": b"<CompleteMultipartUploadResult><ETag>&quot;e-2&quot;</ETag></CompleteMultipartUploadResult>",
        "error.xml": b"<Error><Code>InternalError</Code><Message>try again</Message></Error>",
    }


def url_pattern_seeds() -> dict[str, bytes]:
    """Patterns and a text to match, separated by a NUL, and an AWS config file (url_pattern_fuzz)."""
    return {
        "braces": b"s3://b/train-{0000..0127}.tar\0s3://b/train-0001.tar",
        "nested": b"x{a,{b,c}d,}{1..9..2}\0xbd3",
        "glob": b"data/[!a-c]*/?\\[1]\0data/x/y[1]",
        "config": b"[profile p]\nregion = eu-west-1\ns3 =\n  endpoint_url = http://h:9000\n",
    }


def format_seeds() -> dict[str, dict[str, bytes]]:
    """Seeds of the formats' parsers (chute.formats): TFRecord files (TFDS and model garden layouts, an
    empty record), LMDB data files written by py-lmdb (pickled tuples with __keys__, dicts, Caffe Datums,
    raw images), the pickles of those layouts in protocols 2 to 5, and Caffe Datums. The writers need
    py-lmdb and the tfrecord package (scripts/setup.sh --dev); without them, only the pickle and Datum seeds."""
    import pickle

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))  # not in the wheel
    from support import format_writers as fw  # noqa: E402

    jpeg = images()["jpeg_sub0.jpg"]
    items = [(jpeg, 3), (jpeg[:200], 0), (b"\x89PNG\r\n\x1a\n" + bytes(40), -1)]
    out = {"tfrecord": {}, "lmdb": {}, "pickle_span": {}, "caffe_datum": {}}
    for protocol in (2, 3, 4, 5):
        out["pickle_span"][f"tuple_p{protocol}"] = pickle.dumps((jpeg[:64], 7), protocol=protocol)
        out["pickle_span"][f"dict_p{protocol}"] = pickle.dumps({"image": jpeg[:64], "label": -2}, protocol=protocol)
        out["pickle_span"][f"keys_p{protocol}"] = pickle.dumps([b"0", b"1", "2", 2**40], protocol=protocol)
    out["caffe_datum"]["encoded"] = fw.caffe_datum(jpeg[:64], 5)
    out["caffe_datum"]["negative_label"] = fw.caffe_datum(b"x", -1)
    out["caffe_datum"]["raw_pixels"] = b"\x08\x03\x10\x02\x18\x02\x22\x0c" + bytes(12) + b"\x28\x01"
    try:
        import lmdb  # noqa: F401
        import tfrecord  # noqa: F401
    except ImportError:
        print("make_fuzz_corpus: no py-lmdb / tfrecord (setup.sh --dev): no TFRecord or LMDB seeds", file=sys.stderr)
        return out
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fw.write_tfds(tmp / "tfds.tfrecord", items)
        fw.write_model_garden([tmp / "garden"], items)
        out["tfrecord"] = {
            "tfds.tfrecord": (tmp / "tfds.tfrecord").read_bytes(),
            "garden": (tmp / "garden").read_bytes(),
        }
        small = [(image[:1500], label) for image, label in items]  # small files: faster fuzzing
        fw.write_folder2lmdb(tmp / "tuples", small, commit_every=2)
        fw.write_lmdb_dicts(tmp / "dicts", small)
        fw.write_caffe_lmdb(tmp / "caffe", small, ["a.jpg", "b.jpg", "c.png"])
        fw.write_raw_lmdb(tmp / "raw", [image for image, _ in items], [b"a", b"b", b"c"])  # one overflow value
        for name in ("tuples", "dicts", "caffe", "raw"):
            out["lmdb"][f"{name}.mdb"] = (tmp / name / "data.mdb").read_bytes()
    return out


def main() -> None:
    root = Path(sys.argv[1])
    for target, seeds in (
        *format_seeds().items(),
        ("shard", packed_seeds()),
        ("tar", tar_seeds()),
        ("s3_xml", s3_xml_seeds()),
        ("url_pattern", url_pattern_seeds()),
    ):
        (root / target).mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (root / target / name).write_bytes(data)
    for target in ("decode", "png", "webp", "exif", "raw"):
        (root / target).mkdir(parents=True, exist_ok=True)
    for name, data in {**images(), **raw_seeds()}.items():
        for control in (0x00, 0x3D, 0x40):  # whole image; a window at reduction 2; the whole-file check
            (root / "decode" / f"{control:02x}_{name}").write_bytes(bytes([control]) + data)
        if name.endswith(".jpg"):
            (root / "exif" / name).write_bytes(data)
        else:
            for control in (0x00, 0x0F):  # whole image; a window away from the corner
                (root / name.rsplit(".", 1)[1] / f"{control:02x}_{name}").write_bytes(bytes([control]) + data)


if __name__ == "__main__":
    main()
