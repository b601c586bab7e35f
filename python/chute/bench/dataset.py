"""Synthetic ImageNet-like JPEG dataset, generated once and cached on disk."""

from __future__ import annotations

import io
import json
import multiprocessing
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from chute import _native

VERSION = 1
DATASET_NAME = f"bench-imagenet-like-v{VERSION}"
# Large originals (shorter side 1000-2000 px, 4:3), for pipelines that shrink them a lot (evaluation from
# full-size photos, decode='reduced').
LARGE_DATASET_NAME = f"bench-large-photos-v{VERSION}"
LARGE_SHORTER_SIDE = (1000, 2000)
# The same generator, 4x the images: `chute bench --remote`'s default, so that a cold epoch lasts seconds and
# its downloads run through it (on 2,000 images most of the dataset arrives before the first batch).
REMOTE_DATASET_NAME = f"bench-imagenet-like-8000-v{VERSION}"
REMOTE_DATASET_IMAGES = 8000
MARKER = "COMPLETE"

# Texture strength giving files of about 100 KB at quality 93 with 4:4:4 chroma.
_TEXTURE_SIGMA = 12.5
_CHROMA_SIGMA = 3.0
_PORTRAIT_FRACTION = 0.1
_SUBSAMPLED_FRACTION = 0.15
_SUBSAMPLING_444 = 0
_SUBSAMPLING_420 = 2


def default_cache_dir() -> Path:
    """Return ``$CHUTE_CACHE_DIR``, else ``$XDG_CACHE_HOME/chute``, else ``~/.cache/chute``."""
    from chute.cache import resolve_cache_dir

    return Path(resolve_cache_dir())


def _resize_field(field: np.ndarray, width: int, height: int) -> np.ndarray:
    """Bilinearly resize a 2-D float32 array to ``height x width``."""
    image = Image.fromarray(field, mode="F")
    return np.asarray(image.resize((width, height), Image.Resampling.BILINEAR))


def _random_colour(rng: np.random.Generator, base: np.ndarray) -> tuple[int, int, int]:
    """Draw a colour scattered around an image's base colour."""
    colour = np.clip(base + rng.normal(0.0, 60.0, 3), 0, 255)
    return tuple(int(c) for c in colour)


def _draw_shapes(rng: np.random.Generator, image: Image.Image, base: np.ndarray) -> None:
    """Draw random ellipses, rectangles, polygons and lines onto ``image``."""
    width, height = image.size
    draw = ImageDraw.Draw(image)
    for _ in range(rng.integers(8, 20)):
        x0, x1 = sorted(int(v) for v in rng.integers(-width // 4, width * 5 // 4, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(-height // 4, height * 5 // 4, 2))
        colour = _random_colour(rng, base)
        kind = rng.integers(4)
        if kind == 0:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        elif kind == 2:
            corners = rng.integers(0, (width, height), (rng.integers(3, 7), 2))
            draw.polygon([(int(x), int(y)) for x, y in corners], fill=colour)
        else:
            draw.line((x0, y0, x1, y1), fill=colour, width=int(rng.integers(1, 8)))


def _texture(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """Return multi-octave grain with a smoothly varying amplitude."""
    grain = rng.standard_normal((height, width), dtype=np.float32)
    for octave, weight in ((2, 0.8), (4, 0.6), (8, 0.5)):
        coarse = rng.standard_normal((height // octave + 2, width // octave + 2), dtype=np.float32)
        grain += (
            weight
            * _resize_field(coarse, width + 2 * octave, height + 2 * octave)[
                octave : octave + height, octave : octave + width
            ]
        )
    amplitude = rng.uniform(0.2, 1.0, (4, 5)).astype(np.float32)
    return grain * _resize_field(amplitude, width, height)


def generate_image(
    rng: np.random.Generator, width: int = 500, height: int = 375, *, detail: float = 1.0
) -> Image.Image:
    """Generate a photo-like RGB image that JPEG cannot compress trivially.

    Smooth colour fields and blurred random shapes give edges and low-frequency content;
    multi-octave grain gives texture. ``detail`` scales the grain: 1.0 yields about 100 KB
    at quality 93 with 4:4:4 chroma for 500x375.
    """
    base = rng.uniform(40.0, 215.0, 3)
    grid_shape = (rng.integers(2, 6), rng.integers(2, 6), 3)
    grid = np.clip(base + rng.normal(0.0, 70.0, grid_shape), 0, 255).astype(np.uint8)
    image = Image.fromarray(grid).resize((width, height), Image.Resampling.BICUBIC)
    _draw_shapes(rng, image, base)
    image = image.filter(ImageFilter.BoxBlur(float(rng.uniform(0.5, 1.5))))
    pixels = np.asarray(image, dtype=np.float32)
    pixels += (detail * _TEXTURE_SIGMA) * _texture(rng, width, height)[..., None]
    pixels += (detail * _CHROMA_SIGMA) * rng.standard_normal((height, width, 3), dtype=np.float32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _detail_for(quality: int, subsampling: int) -> float:
    """Return the texture strength that keeps files near 100 KB at this JPEG setting."""
    detail = ((100 - quality) / 7) ** 1.2
    return detail * 1.5 if subsampling == _SUBSAMPLING_420 else detail


def _write_image(task: tuple[Path, int, int, tuple[int, int] | None]) -> int:
    """Generate and save image ``index`` of the dataset seeded ``seed``; return its byte size. With
    ``shorter_side`` (lo, hi), the shorter side is drawn from it and the longer one is 4/3 of it; else
    the image is about 500x375."""
    path, seed, index, shorter_side = task
    rng = np.random.default_rng((seed, index))
    if shorter_side is None:
        width = int(rng.integers(480, 521))
        height = int(rng.integers(360, 391))
    else:
        height = int(rng.integers(shorter_side[0], shorter_side[1] + 1))
        width = height * 4 // 3
    if rng.random() < _PORTRAIT_FRACTION:
        width, height = height, width
    quality = int(rng.integers(90, 97))
    subsampling = _SUBSAMPLING_420 if rng.random() < _SUBSAMPLED_FRACTION else _SUBSAMPLING_444
    image = generate_image(rng, width, height, detail=_detail_for(quality, subsampling))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality, subsampling=subsampling)
    path.write_bytes(buffer.getvalue())
    return buffer.tell()


def _read_manifest(root: Path) -> dict | None:
    """Return the manifest of a complete dataset at ``root``, or None."""
    try:
        return json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _generate(tmp: Path, tasks: list[tuple[Path, int, int]], progress: bool) -> None:
    """Write all images of ``tasks`` in parallel, with an optional progress bar."""
    processes = max(1, min(_native.available_cores(), len(tasks)))
    with multiprocessing.Pool(processes) as pool:
        results = pool.imap_unordered(_write_image, tasks, chunksize=8)
        if not progress:
            for _ in results:
                pass
            return
        from rich.progress import Progress

        with Progress() as bar:
            job = bar.add_task(f"Generating {tmp.name}", total=len(tasks))
            for _ in results:
                bar.advance(job)


def ensure_dataset(
    root: Path | None = None,
    *,
    num_images: int = 2000,
    num_classes: int = 10,
    seed: int = 0,
    progress: bool = True,
    shorter_side: tuple[int, int] | None = None,
) -> Path:
    """Return an ImageFolder tree of synthetic JPEGs at ``root``, generating it if needed.

    The tree is built in a temporary sibling directory and renamed into place once its
    ``COMPLETE`` manifest is written, so an interrupted run never leaves a tree that looks
    complete. Image ``i`` goes to ``class_{i % num_classes}`` and depends only on ``seed``
    and ``i``. Images are about 500x375 (ImageNet's typical size), or with ``shorter_side=(lo, hi)``
    4:3 photos whose shorter side is drawn from [lo, hi].
    """
    root = Path(root) if root is not None else default_cache_dir() / DATASET_NAME
    manifest = {"version": VERSION, "count": num_images, "classes": num_classes, "seed": seed}
    if shorter_side is not None:
        manifest["shorter_side"] = list(shorter_side)
    existing = _read_manifest(root)
    if existing == manifest:
        return root
    if existing is not None:
        raise FileExistsError(f"{root} holds a different dataset: {existing}")
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not a complete chute dataset")
    if num_images < 1 or num_classes < 1:
        raise ValueError("num_images and num_classes must be positive")

    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        class_dirs = [tmp / f"class_{c:02d}" for c in range(num_classes)]
        for class_dir in class_dirs:
            class_dir.mkdir()
        tasks = [(class_dirs[i % num_classes] / f"img_{i:05d}.jpg", seed, i, shorter_side) for i in range(num_images)]
        _generate(tmp, tasks, progress)
        (tmp / MARKER).write_text(json.dumps(manifest))
        if root.exists():
            root.rmdir()
        tmp.rename(root)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        # Another process may have completed the same dataset first.
        if _read_manifest(root) == manifest:
            return root
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def ensure_large_dataset(
    root: Path | None = None, *, num_images: int = 64, seed: int = 0, progress: bool = True
) -> Path:
    """Return (generating it once) a tree of large photos: 4:3, shorter side 1000-2000 px."""
    root = Path(root) if root is not None else default_cache_dir() / LARGE_DATASET_NAME
    return ensure_dataset(
        root, num_images=num_images, num_classes=1, seed=seed, progress=progress, shorter_side=LARGE_SHORTER_SIDE
    )


def ensure_remote_dataset(root: Path | None = None, *, progress: bool = True) -> Path:
    """Return (generating it once) the ImageNet-like tree with 8,000 images, for ``chute bench --remote``.
    Image ``i`` is the same as in the default dataset (it depends only on the seed and ``i``)."""
    root = Path(root) if root is not None else default_cache_dir() / REMOTE_DATASET_NAME
    return ensure_dataset(root, num_images=REMOTE_DATASET_IMAGES, progress=progress)
