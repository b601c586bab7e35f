"""FFCV's side of ``chute bench --sweep-storage``, run as a script by a Python that has ffcv installed (it
imports nothing of chute, whose environment need not have ffcv):

    FFCV_PYTHON ffcv_peer.py --samples S.json --beton OUT.beton --eval-out EVAL.npy [--pipeline train] ...

Writes the samples (``[[path, label], ...]``, the originals in chute's order) with FFCV's ``DatasetWriter``
and ``RGBImageField(write_mode='jpg', max_resolution=N, jpeg_quality=90)``, then reads them with FFCV's
standard ImageNet pipeline (ffcv-imagenet's ``train_imagenet.py``, on the CPU: no ``ToDevice``/normalise):
``RandomResizedCropRGBImageDecoder((224, 224))`` + ``RandomHorizontalFlip`` (train) or
``CenterCropRGBImageDecoder((224, 224), ratio=224/256)`` (eval), ``ToTensor``, ``ToTorchImage``, uint8.
Times a warm-up epoch (numba compiles there) and ``rounds`` epochs with chute's one epoch timer
(harness.py beside this file, loaded by its path: it needs nothing of chute), writes the eval outputs (NHWC
uint8, in order) to EVAL.npy, and prints one JSON line: epochs (each one's images, seconds, batches and
CPU seconds of this process, FFCV's threads run in it), bytes of the .beton, write seconds, and the eval
labels.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from harness import Contender, interleave, time_epoch  # beside this script, which is run as one (sys.path[0])
from PIL import Image


class Originals:
    """(RGB uint8 HWC, label) per sample, decoded by PIL as torchvision's ImageFolder does."""

    def __init__(self, samples: list) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB")), int(label)


def main() -> None:
    from ffcv.fields import IntField, RGBImageField
    from ffcv.fields.decoders import (
        CenterCropRGBImageDecoder,
        IntDecoder,
        RandomResizedCropRGBImageDecoder,
    )
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage
    from ffcv.writer import DatasetWriter

    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", required=True)
    parser.add_argument("--beton", required=True)
    parser.add_argument("--eval-out", required=True)
    parser.add_argument("--pipeline", choices=("train", "eval"), default="train")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, required=True)  # chute passes its available_cores()
    parser.add_argument("--max-resolution", type=int, default=256)
    args = parser.parse_args()
    with open(args.samples) as f:
        samples = json.load(f)

    start = time.perf_counter()
    writer = DatasetWriter(
        args.beton,
        {
            "image": RGBImageField(write_mode="jpg", max_resolution=args.max_resolution, jpeg_quality=90),
            "label": IntField(),
        },
        num_workers=args.threads,
    )
    writer.from_indexed_dataset(Originals(samples))
    write_s = time.perf_counter() - start

    def loader(train: bool):
        decoder = (
            RandomResizedCropRGBImageDecoder((224, 224))
            if train
            else CenterCropRGBImageDecoder((224, 224), ratio=224 / 256)
        )
        image = [decoder] + ([RandomHorizontalFlip()] if train else []) + [ToTensor(), ToTorchImage()]
        return Loader(
            args.beton,
            batch_size=args.batch_size,
            num_workers=args.threads,
            order=OrderOption.RANDOM if train else OrderOption.SEQUENTIAL,
            os_cache=True,
            drop_last=False,
            pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]},
        )

    timed = loader(args.pipeline == "train")
    ffcv = Contender("ffcv", lambda: time_epoch(timed, cpu_clock=time.process_time))
    interleave([ffcv], rounds=args.rounds)  # its warm-up epoch: numba compiles the pipeline

    out = np.lib.format.open_memmap(args.eval_out, mode="w+", dtype=np.uint8, shape=(len(samples), 224, 224, 3))
    labels, at = [], 0
    for x, y in loader(False):
        batch = x.permute(0, 2, 3, 1).numpy()  # ToTorchImage's NCHW view of FFCV's NHWC buffer
        out[at : at + len(batch)] = batch
        labels.extend(int(v) for v in y.reshape(-1))
        at += len(batch)
    out.flush()
    print(
        json.dumps(
            {
                "epochs": [
                    {"items": t.items, "seconds": t.seconds, "batches": t.batches, "cpu_seconds": t.cpu_seconds}
                    for t in ffcv.timings
                ],
                "bytes": os.path.getsize(args.beton),
                "write_s": write_s,
                "eval_labels": labels,
            }
        )
    )


if __name__ == "__main__":
    main()
