"""PNG decoding through chute.Loader: every PNG kind gives exactly Pillow's ``Image.open(f).convert("RGB")``.

These tests exercise cpp/src/decode/png_decoder.cc through the loader, so they need the PNG decoder to be wired
into the sample processor (format chosen from the file's magic bytes, not its name). Until that
integration lands they fail, on purpose: nothing here is skipped, so a loader that cannot read PNG, or
reads it differently from Pillow, shows up as a failure rather than a silent skip.

Each kind is written into an ImageFolder tree, by Pillow where Pillow can write it, and otherwise (16-bit
colour, 16-bit gray+alpha, a palette shorter than its indices, Adam7 interlacing) by the small raw
writer below; Pillow's decode of the file is the reference in every case. The conversion rules that the
raw kinds rely on are asserted against Pillow as the files are made (``RULES``):

* 16-bit RGB/RGBA/gray+alpha keep the most significant byte (truncation, not rounding);
* 16-bit gray opens as "I;16" and convert("RGB") clips values above 255 to 255;
* alpha is dropped, never composited; tRNS is ignored; palette indices past the palette are black;
* 1/2/4-bit gray scale by bit replication (0/255, x85, x17).

One PNG is named ``.jpg`` and one JPEG ``.png``: the loader must go by the bytes.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import chute

H, W = 23, 37  # odd sizes: partial bytes at the end of low-bit-depth rows, every Adam7 pass non-empty

# ---------------------------------------------------------------------------------------------------
# A raw PNG writer for the kinds Pillow cannot write (filter type 0 on every scanline).

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
GRAY, RGB, PALETTE, GRAY_ALPHA, RGBA = 0, 2, 3, 4, 6


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _pack_row(row: np.ndarray, depth: int) -> bytes:
    flat = row.reshape(-1)
    if depth == 16:
        return flat.astype(">u2").tobytes()
    if depth == 8:
        return flat.astype(np.uint8).tobytes()
    bits = np.unpackbits(flat.astype(np.uint8)[:, None], axis=1)[:, 8 - depth :]
    return np.packbits(bits.reshape(-1)).tobytes()


def raw_png(
    samples: np.ndarray,
    depth: int,
    color_type: int,
    palette: bytes | None = None,
    trns: bytes | None = None,
    interlace: bool = False,
) -> bytes:
    """``samples``: (height, width, channels) integers below 2**depth."""
    h, w = samples.shape[:2]
    images = [samples[y0::dy, x0::dx] for x0, y0, dx, dy in ADAM7] if interlace else [samples]
    raw = b"".join(b"\0" + _pack_row(row, depth) for img in images if img.size for row in img)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace)))
    if palette is not None:
        out += _chunk(b"PLTE", palette)
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    return out + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


# ---------------------------------------------------------------------------------------------------
# The kinds. Each maker returns the file's bytes and, for raw-written kinds, the RGB its rule predicts.


def _pillow(img: Image.Image, **save) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", **save)
    return buf.getvalue()


def _rgb_image(rng, channels=3) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    smooth = np.stack([(x * 7 + y * 3 + 40 * c) % 256 for c in range(channels)], axis=-1)
    noise = rng.integers(0, 256, (H, W, channels))
    return np.where(rng.random((H, W, 1)) < 0.5, smooth, noise).astype(np.uint8)


def _palette(rng, n: int) -> bytes:
    return rng.integers(0, 256, 3 * n, dtype=np.uint8).tobytes()


def _p_image(rng, n: int) -> Image.Image:
    img = Image.frombytes("P", (W, H), rng.integers(0, n, (H, W), dtype=np.uint8).tobytes())
    img.putpalette(_palette(rng, n))
    return img


def make_rgb8(rng):
    return _pillow(Image.fromarray(_rgb_image(rng))), None


def make_rgba8(rng):
    return _pillow(Image.fromarray(_rgb_image(rng, 4))), None


def make_gray8(rng):
    return _pillow(Image.fromarray(_rgb_image(rng)[..., 0])), None


def make_gray_alpha8(rng):
    return _pillow(Image.fromarray(_rgb_image(rng)[..., :2])), None


def make_gray8_trns(rng):
    return _pillow(Image.fromarray(_rgb_image(rng)[..., 0]), transparency=7), None


def make_rgb8_trns(rng):
    return _pillow(Image.fromarray(_rgb_image(rng)), transparency=(1, 2, 3)), None


def make_gray1(rng):
    return _pillow(Image.fromarray(_rgb_image(rng)[..., 0]).convert("1")), None


def make_gray2(rng):
    return _pillow(Image.fromarray(rng.integers(0, 4, (H, W), dtype=np.uint8) * 85), bits=2), None


def make_gray4(rng):
    return _pillow(Image.fromarray(rng.integers(0, 16, (H, W), dtype=np.uint8) * 17), bits=4), None


def make_palette8(rng):
    return _pillow(_p_image(rng, 256)), None


def make_palette8_trns(rng):
    return _pillow(_p_image(rng, 256), transparency=bytes(range(0, 256, 3))), None


def make_palette1(rng):
    return _pillow(_p_image(rng, 2)), None


def make_palette2_trns(rng):
    return _pillow(_p_image(rng, 4), transparency=b"\x00\x80"), None


def make_palette4(rng):
    return _pillow(_p_image(rng, 16)), None


def make_gray16(rng):
    v = rng.integers(0, 65536, (H, W)).astype(np.uint16)
    v = np.where(rng.random((H, W)) < 0.5, v & 0xFF, v)  # half at most 255, kept; half clipped
    v.flat[:6] = [0, 255, 256, 257, 0xFF00, 0xFFFF]
    data = _pillow(Image.frombytes("I;16", (W, H), v.astype("<u2").tobytes()))
    return data, np.repeat(np.minimum(v, 255).astype(np.uint8)[..., None], 3, axis=-1)


def _raw(rng, depth, color_type, channels, interlace=False, palette_size=0, trns=None):
    top = 2**depth
    samples = rng.integers(0, top, (H, W, channels)).astype(np.uint16)
    if depth == 16:
        samples.reshape(-1)[:6] = [0, 255, 256, 0x00FF, 0xFF00, 0xFFFF]
    palette = _palette(rng, palette_size) if palette_size else None
    data = raw_png(samples, depth, color_type, palette=palette, trns=trns, interlace=interlace)
    hi = (samples >> 8 if depth == 16 else samples).astype(np.uint8)
    if color_type == PALETTE:
        table = np.zeros((256, 3), np.uint8)
        table[:palette_size] = np.frombuffer(palette, np.uint8).reshape(-1, 3)
        want = table[samples[..., 0]]  # past the palette's end: black
    elif color_type == GRAY:
        if depth == 16:
            want = np.minimum(samples[..., :1], 255).astype(np.uint8)
        else:
            want = (samples[..., :1] * (255 // (top - 1))).astype(np.uint8)
        want = np.repeat(want, 3, axis=-1)
    elif color_type == GRAY_ALPHA:
        want = np.repeat(hi[..., :1], 3, axis=-1)
    else:
        want = hi[..., :3]
    return data, want


def make_rgb16(rng):
    return _raw(rng, 16, RGB, 3)


def make_rgba16(rng):
    return _raw(rng, 16, RGBA, 4)


def make_gray_alpha16(rng):
    return _raw(rng, 16, GRAY_ALPHA, 2)


def make_palette4_short(rng):
    return _raw(rng, 4, PALETTE, 1, palette_size=5)


def make_rgb8_adam7(rng):
    return _raw(rng, 8, RGB, 3, interlace=True)


def make_rgba16_adam7(rng):
    return _raw(rng, 16, RGBA, 4, interlace=True)


def make_gray1_adam7(rng):
    return _raw(rng, 1, GRAY, 1, interlace=True)


def make_gray16_adam7(rng):
    return _raw(rng, 16, GRAY, 1, interlace=True)


def make_gray_alpha8_adam7(rng):
    return _raw(rng, 8, GRAY_ALPHA, 2, interlace=True)


def make_palette4_adam7(rng):
    return _raw(rng, 4, PALETTE, 1, interlace=True, palette_size=16, trns=bytes(range(0, 160, 10)))


KINDS = {name[len("make_") :]: fn for name, fn in sorted(globals().items()) if name.startswith("make_")}


def pil_rgb(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        return np.asarray(Image.open(f).convert("RGB"))


def write_kind(path: Path, kind: str, seed: int) -> None:
    data, want = KINDS[kind](np.random.default_rng(seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    if want is not None:  # the rule this raw-written kind relies on, checked against Pillow itself
        np.testing.assert_array_equal(pil_rgb(path), want, err_msg=f"Pillow's rule for {kind}")


def jpeg_bytes(rng) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_rgb_image(rng)).save(buf, format="JPEG", quality=95, subsampling=0)
    return buf.getvalue()


def decode_all(root: Path, transforms, **kwargs) -> list[tuple[Path, np.ndarray]]:
    source = chute.ImageFolder(root)
    loader = chute.Loader(source, batch_size=1, transforms=transforms, **kwargs)
    out = []
    for (images, labels), (path, label) in zip(loader, source.samples, strict=True):
        assert images.shape[0] == 1 and images.dtype == torch.uint8
        assert int(labels[0]) == label
        out.append((Path(path), images[0].permute(1, 2, 0).numpy().copy()))
    return out


# ---------------------------------------------------------------------------------------------------


def test_rules_table_covers_every_kind_in_the_brief():
    assert set(KINDS) >= {
        "rgb8",
        "rgba8",
        "gray8",
        "gray_alpha8",
        "palette8",
        "palette8_trns",
        "gray1",
        "gray2",
        "gray4",
        "palette1",
        "palette2_trns",
        "palette4",
        "rgb16",
        "gray16",
        "rgb8_adam7",
    }


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_png_kind_decodes_exactly_like_pillow(tmp_path, kind):
    for c in range(2):
        for i in range(2):
            write_kind(tmp_path / f"class_{c}" / f"{kind}_{i}.png", kind, seed=10 * c + i)
    got = decode_all(tmp_path, [chute.CenterCrop((H, W))])
    assert len(got) == 4
    for path, image in got:
        np.testing.assert_array_equal(image, pil_rgb(path), err_msg=str(path))


@pytest.mark.parametrize("kind", ["rgb8", "palette4", "gray16", "rgba16", "gray1_adam7", "palette4_adam7"])
def test_centre_crop_of_a_png_is_pillows_crop(tmp_path, kind):
    # A crop smaller than the image decodes only a window of it; no resize, so the pixels are exact.
    write_kind(tmp_path / "a" / f"{kind}.png", kind, seed=3)
    h, w = H - 6, W - 11
    top, left = int(round((H - h) / 2.0)), int(round((W - w) / 2.0))
    ((path, image),) = decode_all(tmp_path, [chute.CenterCrop((h, w))])
    np.testing.assert_array_equal(image, pil_rgb(path)[top : top + h, left : left + w])


def test_format_comes_from_the_bytes_not_the_name(tmp_path):
    rng = np.random.default_rng(5)
    write_kind(tmp_path / "mixed" / "png_named.jpg", "rgb8", seed=1)
    (tmp_path / "mixed" / "jpeg_named.png").write_bytes(jpeg_bytes(rng))
    write_kind(tmp_path / "mixed" / "real.png", "palette2_trns", seed=2)
    (tmp_path / "mixed" / "real.jpg").write_bytes(jpeg_bytes(rng))
    got = decode_all(tmp_path, [chute.CenterCrop((H, W))])
    assert sorted(p.name for p, _ in got) == ["jpeg_named.png", "png_named.jpg", "real.jpg", "real.png"]
    for path, image in got:
        np.testing.assert_array_equal(image, pil_rgb(path), err_msg=str(path))


def test_every_kind_in_one_folder_with_threads(tmp_path):
    for i, kind in enumerate(sorted(KINDS)):
        write_kind(tmp_path / f"class_{i % 3}" / f"{kind}.png", kind, seed=100 + i)
    (tmp_path / "class_0" / "zz_jpeg_named.png").write_bytes(jpeg_bytes(np.random.default_rng(9)))
    write_kind(tmp_path / "class_1" / "zz_png_named.jpg", "gray16", seed=7)
    got = decode_all(tmp_path, [chute.CenterCrop((H, W))], num_threads=4)
    assert len(got) == len(KINDS) + 2
    for path, image in got:
        np.testing.assert_array_equal(image, pil_rgb(path), err_msg=str(path))


def test_truncated_png_is_a_sample_error(tmp_path):
    # The good file comes first, so the error is about the PNG decoder's verdict, not a missing decoder.
    write_kind(tmp_path / "a" / "a_good.png", "rgb8", seed=1)
    data, _ = KINDS["rgb8"](np.random.default_rng(2))
    (tmp_path / "a" / "b_cut.png").write_bytes(data[: len(data) // 2])
    loader = chute.Loader(chute.ImageFolder(tmp_path), batch_size=1, transforms=[chute.CenterCrop((H, W))])
    it = iter(loader)
    images, _ = next(it)
    np.testing.assert_array_equal(images[0].permute(1, 2, 0).numpy(), pil_rgb(tmp_path / "a" / "a_good.png"))
    with pytest.raises(chute.SampleError) as info:
        next(it)
    assert info.value.index == 1 and info.value.path.endswith("b_cut.png")
    assert "truncated PNG file" in info.value.reason
