"""Writes small seed inputs for the fuzz targets in cpp/fuzz: JPEGs of each kind (baseline, progressive,
4:4:4/4:2:2/4:2:0, grayscale, CMYK, with EXIF) and PNGs (RGB, RGBA, gray, palette, 16-bit, interlaced).
decode_fuzz and png_fuzz read a control byte before the file, so their seeds get one.

    python3 scripts/make_fuzz_corpus.py OUT_DIR     # writes OUT_DIR/decode, OUT_DIR/png and OUT_DIR/exif
"""

from __future__ import annotations

import io
import sys
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
    return out


def main() -> None:
    root = Path(sys.argv[1])
    for target in ("decode", "png", "exif"):
        (root / target).mkdir(parents=True, exist_ok=True)
    for name, data in images().items():
        for control in (0x00, 0x3D):  # whole image; a window at reduction 2
            (root / "decode" / f"{control:02x}_{name}").write_bytes(bytes([control]) + data)
        if name.endswith(".jpg"):
            (root / "exif" / name).write_bytes(data)
        else:
            for control in (0x00, 0x0F):  # whole image; a window away from the corner
                (root / "png" / f"{control:02x}_{name}").write_bytes(bytes([control]) + data)


if __name__ == "__main__":
    main()
