"""How far chute's fast path is from torchvision where v2 resizes uint8 tensors (torch's antialiased resize
rounds differently from PIL's, which chute follows), over a whole dataset: the figures behind the
tolerance stated in README.md ("Native fast paths").

    .venv-tv/bin/python bench/v2_tolerance.py [--images 2000] [--root DIR]

Needs real torchvision (.venv-tv; scripts/test_torchvision.sh builds it). The dataset is chute's bench set
(python/chute/bench/dataset.py: synthetic ImageNet-like JPEGs, ~500x375, generated once and cached) unless
--root names an ImageFolder tree: photos of your own are read as they are; an empty or missing --root gets
the synthetic set (with --shorter-side LO HI, of other sizes). Each pipeline's uint8 output through
chute.DataLoader (its fast path: checked) is compared value by value with torch's DataLoader over the same
dataset object:

* PIL-control: Resize(256), CenterCrop(224) on PIL images, then ToImage (chute is bit-exact here);
* ToImage-first: ToImage(), Resize(256), CenterCrop(224): the resize on a uint8 tensor;
* decode_image: ImageFolder(loader=decode_image) with Resize(256), CenterCrop(224) on its uint8 tensors.

Printed per pipeline: the count of values at each absolute difference (0, 1, 2, 3 and more levels of 255),
the largest, the mean absolute error, and the images that hold a difference of 2 levels or more.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader


def pipelines(v2, decode_image):
    geometry = [v2.Resize(256), v2.CenterCrop(224)]
    return {
        "PIL-control": (v2.Compose([*geometry, v2.ToImage()]), None),
        "ToImage-first": (v2.Compose([v2.ToImage(), *geometry]), None),
        "decode_image": (v2.Compose(geometry), decode_image),
    }


def compare(name: str, dataset, batch_size: int) -> None:
    import chute

    fast = chute.DataLoader(dataset, batch_size=batch_size)
    if fast.stats()["path"] != "fast:imagefolder":
        sys.exit(f"{name}: chute.DataLoader took the {fast.stats()['path']} path ({fast.stats()['fallback_reason']})")
    reference = DataLoader(dataset, batch_size=batch_size, num_workers=2)
    counts = torch.zeros(4, dtype=torch.int64)  # |difference| 0, 1, 2, 3+
    abs_sum, largest, images, flagged = 0, 0, 0, 0
    for (ours, labels), (theirs, ref_labels) in zip(fast, reference):
        assert torch.equal(labels, ref_labels) and ours.dtype == theirs.dtype == torch.uint8
        diff = (ours.to(torch.int16) - theirs.to(torch.int16)).abs()
        counts += torch.bincount(diff.clamp(max=3).flatten(), minlength=4)
        abs_sum += int(diff.sum())
        largest = max(largest, int(diff.max()))
        flagged += int((diff.flatten(1).amax(1) >= 2).sum())
        images += len(labels)
    total = int(counts.sum())
    shares = ", ".join(
        f"{lv}{'+' if lv == 3 else ''}: {int(c):,} ({100 * int(c) / total:.4f}%)" for lv, c in enumerate(counts)
    )
    print(
        f"{name:14s} {images} images, {total:,} values; |difference| {shares}; max {largest}; "
        f"MAE {abs_sum / total:.4f}; images with a value 2+ levels off: {flagged}"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--root", type=Path, default=None, help="an ImageFolder tree (default: chute's bench set)")
    p.add_argument(
        "--shorter-side",
        type=int,
        nargs=2,
        metavar=("LO", "HI"),
        help="generate 4:3 photos whose shorter side is drawn from [LO, HI] into --root (default: ~500x375)",
    )
    args = p.parse_args(argv)
    try:
        import torchvision
        from torchvision import datasets
        from torchvision.io import decode_image
        from torchvision.transforms import v2
    except (ImportError, OSError, RuntimeError) as e:
        sys.exit(f"needs torchvision ({type(e).__name__}: {e}): run it in .venv-tv (scripts/test_torchvision.sh)")
    import PIL

    from chute.bench.dataset import MARKER, ensure_dataset

    shorter = tuple(args.shorter_side) if args.shorter_side else None
    root = args.root
    own = root is not None and root.is_dir() and any(root.iterdir()) and not (root / MARKER).exists()
    if not own:  # chute's synthetic set, generated once
        root = ensure_dataset(root, num_images=args.images, shorter_side=shorter, progress=False)
    print(
        f"{root}; torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow {PIL.__version__}; "
        f"{len(os.sched_getaffinity(0))} cores"
    )
    for name, (transform, loader) in pipelines(v2, decode_image).items():
        kwargs = {"loader": loader} if loader is not None else {}
        compare(name, datasets.ImageFolder(root, transform=transform, **kwargs), args.batch_size)


if __name__ == "__main__":
    main()
