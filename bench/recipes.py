"""The recipes people train with, through chute.DataLoader against torch's DataLoader: torchvision's reference
presets (references/classification/presets.py, transcribed in python/tests/support/classification_presets.py),
same dataset object, same workers, interleaved round by round, in one run.

    .venv-tv/bin/python bench/recipes.py [--images 1000] [--workers 2] [--rounds 3] [--v1] [--batch-size 64]

Needs real torchvision (torch's side runs its transforms): run it in .venv-tv (scripts/test_torchvision.sh
sets that up). The dataset is chute's bench set (python/chute/bench/dataset.py: ImageNet-like JPEGs, ~500x375,
generated once and cached); files are read once first (warm page cache). Pipelines (crop 224, v2 unless --v1):

* eval:         ClassificationPresetEval(crop_size=224)
* ta_wide+re:   ClassificationPresetTrain(auto_augment_policy="ta_wide", random_erase_prob=0.1)  (train.py's
                ImageNet recipe)
* ta_wide+re+mix: the same with train.py's collate_fn, lambda batch: mixup_cutmix(*default_collate(batch)),
                v2.RandomChoice([v2.MixUp(alpha=0.2), v2.CutMix(alpha=1.0)])
* ra, aa, augmix: RandAugment (magnitude 9), AutoAugment (imagenet), AugMix (severity 3)

Printed per pipeline: the path chute.DataLoader took (fast or generic, with the reason), the median images/s
of each loader with its range, and the median of the per-round ratios torch time / chute time (each round
runs both, so load from other processes falls on both alike). The load average is printed at the end: on a
shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, default_collate

from chute.bench.harness import Contender, interleave, time_epoch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
from support.classification_presets import make_presets  # noqa: E402

NUM_CLASSES = 1000  # train.py's num_classes for MixUp/CutMix (the bench set has fewer: labels stay valid)


def presets():
    import torchvision.transforms
    import torchvision.transforms.v2

    return make_presets(
        lambda use_v2: torchvision.transforms.v2 if use_v2 else torchvision.transforms,
        torchvision.transforms.InterpolationMode,
    )


def mixup_cutmix_collate(num_classes: int):
    """train.py's collate_fn with its default alphas (--mixup-alpha 0.2, --cutmix-alpha 1.0)."""
    from torchvision.transforms import v2

    mixup_cutmix = v2.RandomChoice(
        [v2.MixUp(alpha=0.2, num_classes=num_classes), v2.CutMix(alpha=1.0, num_classes=num_classes)]
    )
    return lambda batch: mixup_cutmix(*default_collate(batch))


def pipelines(use_v2: bool) -> dict[str, tuple[object, object]]:
    """name -> (transform, collate_fn or None)."""
    train, evaluate = presets()

    def t(**kwargs):
        return train(crop_size=224, use_v2=use_v2, **kwargs)

    return {
        "eval": (evaluate(crop_size=224, use_v2=use_v2), None),
        "ta_wide+re": (t(auto_augment_policy="ta_wide", random_erase_prob=0.1), None),
        "ta_wide+re+mix": (t(auto_augment_policy="ta_wide", random_erase_prob=0.1), mixup_cutmix_collate(NUM_CLASSES)),
        "ra": (t(auto_augment_policy="ra"), None),
        "aa": (t(auto_augment_policy="imagenet"), None),
        "augmix": (t(auto_augment_policy="augmix"), None),
    }


def run(name: str, dataset, collate_fn, args) -> float:
    """Both loaders over `dataset`; prints their figures and returns the median per-round ratio."""
    from chute import DataLoader as ChuteDataLoader

    kwargs = {"batch_size": args.batch_size, "shuffle": True, "num_workers": args.workers, "drop_last": True}
    if collate_fn is not None:
        kwargs["collate_fn"] = collate_fn
    persistent = {"persistent_workers": args.workers > 0}
    theirs = DataLoader(dataset, **kwargs, **persistent)
    ours = ChuteDataLoader(dataset, **kwargs, **persistent)
    stats = ours.stats()
    path = stats["path"] + (f" ({stats['fallback_reason']})" if stats.get("fallback_reason") else "")
    contenders = [Contender("torch", lambda: time_epoch(theirs)), Contender("chute", lambda: time_epoch(ours))]
    try:
        interleave(contenders, rounds=args.rounds)
    finally:
        for dl in (theirs, ours):
            iterator = getattr(dl, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
    torch_c, chute_c = contenders
    ratios = [a.seconds / b.seconds for a, b in zip(torch_c.timings, chute_c.timings)]
    ratio = statistics.median(ratios)
    print(
        f"| {name:<15} | {path[:70]:<70} | {torch_c.rate:7.0f} ({torch_c.summary.range_text()}) | "
        f"{chute_c.rate:7.0f} ({chute_c.summary.range_text()}) | {ratio:5.2f}x |",
        flush=True,
    )
    return ratio


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="num_workers of both DataLoaders")
    p.add_argument("--rounds", type=int, default=3, help="timed epochs per loader, interleaved (median)")
    p.add_argument("--v1", action="store_true", help="the presets with use_v2=False")
    p.add_argument("--pipeline", nargs="+", default=None, help="a subset of the pipelines, by name")
    p.add_argument("--root", type=Path, default=None, help="dataset directory (default: chute's bench cache)")
    args = p.parse_args(argv)
    try:
        import torchvision  # noqa: F401
    except (ImportError, OSError, RuntimeError) as e:
        sys.exit(f"bench/recipes.py needs torchvision ({type(e).__name__}: {e}); run it in .venv-tv")

    from torchvision import datasets

    from chute.bench.dataset import ensure_dataset

    root = ensure_dataset(args.root, num_images=args.images)
    chosen = pipelines(use_v2=not args.v1)
    names = args.pipeline or list(chosen)
    print(
        f"{args.images} JPEGs in {root}; torchvision presets (use_v2={not args.v1}), crop 224; batch "
        f"{args.batch_size}; num_workers={args.workers} on both sides; {args.rounds} rounds, interleaved; "
        f"cores: {len(os.sched_getaffinity(0))}; torch {torch.__version__}"
    )
    print(f"| {'pipeline':<15} | {'chute.DataLoader path':<70} | torch img/s (range) | chute img/s (range) | ratio |")
    print(f"|{'-' * 17}|{'-' * 72}|---|---|---|")
    warm = False
    for name in names:
        transform, collate_fn = chosen[name]
        dataset = datasets.ImageFolder(root, transform=transform)
        if not warm:  # warm the page cache: both sides read from memory
            for path, _ in dataset.samples:
                with open(path, "rb") as f:
                    f.read()
            warm = True
        run(name, dataset, collate_fn, args)
    load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    busy = " (above the core count: other processes took CPU time from both sides)" if load > cores else ""
    print(f"load average at the end: {load:.2f} on {cores} cores{busy}")


if __name__ == "__main__":
    main()
