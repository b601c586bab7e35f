"""decode='reduced' against decode='exact': pixel error and speed, for reducing_gap 3 (the default), 2 and 1.5,
and 1.0 (reduce as far as the resize allows: the old scaled_decode=True, the most DCT scaling can buy).

    .venv/bin/python bench/reduced_decode.py [--images 300] [--large 32] [--rounds 3] [--threads N]

Two sets of photos, both made by chute's bench generator (chute/bench/dataset.py, cached once):
  - the bench's photos (about 500x375, ImageNet's typical size), the first --images of them;
  - large originals: 4:3, shorter side 1000-2000 px, the first --large of them.
Two pipelines: eval, Resize(256) + CenterCrop(224); train, RandomResizedCrop(224) + RandomHorizontalFlip.
Output uint8 (no Normalize: the error is in pixel levels).

Error: the same loader settings and seed with decode='exact' and with decode='reduced' (shuffle off, so
each sample draws the same crop and flip): |reduced - exact| over every channel value of every image, its
mean (MAE), 99th percentile and maximum, and the images that differ at all (the ones that were reduced).
Speed: images per second received by the consumer over one epoch (img/s) and images per CPU-second of this
process (img/CPUs: chute's threads run in it; the per-core rate, which holds when other work shares the
cores), a warm-up epoch first, then --rounds epochs of each setting alternating (medians); "vs exact" is
the ratio of img/CPUs to decode='exact' in the same run. Hot cache.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import chute
from chute.bench.dataset import ensure_dataset, ensure_large_dataset
from chute.bench.run import available_cores
from chute.bench.storage import compare, interleaved_rates, outputs

GAPS = (3.0, 2.0, 1.5, 1.0)
PIPELINES = {
    "eval": lambda: [chute.Resize(256), chute.CenterCrop(224)],
    "train": lambda: [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()],
}


def first(root: Path, count: int, directory: Path) -> chute.FileList:
    """The first ``count`` samples of an ImageFolder tree, as a file list."""
    samples = chute.ImageFolder(root).samples[:count]
    listing = directory / f"{root.name}-{count}.txt"
    listing.write_text("".join(f"{os.fsdecode(p)} {label}\n" for p, label in samples))
    return chute.FileList(listing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=300, help="bench photos to use (default 300)")
    parser.add_argument("--large", type=int, default=32, help="large originals to use, at most 64 (default 32)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    if not 1 <= args.large <= 64 or not 1 <= args.images <= 2000:
        parser.error("--large must be in [1, 64] and --images in [1, 2000] (the generated sets' sizes)")
    settings = [("exact", 3.0)] + [("reduced", g) for g in GAPS]
    with tempfile.TemporaryDirectory() as tmp:
        sets = {
            "bench photos (~500x375)": first(ensure_dataset(progress=False), args.images, Path(tmp)),
            "large (shorter side 1000-2000)": first(ensure_large_dataset(progress=False), args.large, Path(tmp)),
        }
        print(
            f"decode='reduced' against 'exact': {args.threads} threads, uint8, batch {args.batch_size}, "
            f"median of {args.rounds} epochs after a warm-up, interleaved, hot cache"
        )
        header = (
            f"{'photos':32s} {'pipeline':8s} {'decode':16s} {'img/s':>8s} {'img/CPUs':>8s} {'vs exact':>8s} {'MAE':>7s} "
            f"{'p99':>4s} {'max':>4s} {'changed':>9s}"
        )
        print(header)
        print("-" * len(header))
        for set_name, source in sets.items():
            for pipeline, transforms in PIPELINES.items():
                kwargs = {"num_threads": args.threads, "prefetch": 2}

                def run(decode: str, gap: float, source=source, transforms=transforms, kwargs=kwargs):
                    return outputs(source, transforms(), args.batch_size, decode=decode, reducing_gap=gap, **kwargs)

                errors = {s: compare(run("exact", 3.0), run(*s)) for s in settings[1:]}
                loaders = {
                    s: chute.Loader(
                        source,
                        args.batch_size,
                        shuffle=True,
                        transforms=transforms(),
                        decode=s[0],
                        reducing_gap=s[1],
                        **kwargs,
                    )
                    for s in settings
                }
                try:
                    rates = interleaved_rates(loaders, args.rounds)
                finally:
                    for loader in loaders.values():
                        loader.close()
                per_core = {s: c.summarize(lambda t: t.rate_per_cpu_second).median for s, c in rates.items()}
                exact = per_core[settings[0]]
                for s in settings:
                    r = rates[s]
                    label = "exact" if s[0] == "exact" else f"reduced, gap {s[1]:g}"
                    e = errors.get(s)
                    error = (
                        f"{e.mae:7.3f} {e.p99:4d} {e.max:4d} {e.changed:4d}/{e.images:<4d}"
                        if e
                        else f"{0:7.3f} {0:4d} {0:4d} {'(reference)':>9s}"
                    )
                    print(
                        f"{set_name:32s} {pipeline:8s} {label:16s} {r.rate:8.0f} {per_core[s]:8.1f} "
                        f"{per_core[s] / exact:7.2f}x {error}"
                    )


if __name__ == "__main__":
    main()
