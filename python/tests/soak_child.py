"""The soak run of test_soak.py, in a process of its own so that its RSS is the loader's story: the RSS
before the loader exists, then per epoch the peak RSS (VmHWM, reset before each epoch through
/proc/self/clear_refs) and the RSS at its end. Prints one JSON line.

    python soak_child.py ROOT EPOCHS
"""

from __future__ import annotations

import json
import sys
import time

import torch

import chute

BATCH, SIZE, PREFETCH = 32, 224, 2


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def main() -> None:
    root, epochs = sys.argv[1], int(sys.argv[2])
    source = chute.ImageFolder(root)
    baseline = status_kb("VmRSS")
    loader = chute.Loader(
        source,
        batch_size=BATCH,
        shuffle=True,
        seed=0,
        num_threads=2,
        prefetch=PREFETCH,
        dtype=torch.float32,
        on_error="skip",
        transforms=[
            chute.RandomResizedCrop(SIZE),
            chute.RandomHorizontalFlip(),
            chute.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ],
    )
    per_epoch = []
    for epoch in range(epochs):
        reset_peak()
        start, samples, checksum = time.perf_counter(), 0, 0.0
        for images, _labels in loader:
            samples += images.shape[0]
            checksum += float(images[:, :, ::56, ::56].sum())  # the consumer reads every batch
        per_epoch.append(
            {
                "epoch": epoch,
                "peak_kb": status_kb("VmHWM"),
                "end_kb": status_kb("VmRSS"),
                "samples": samples,
                "seconds": time.perf_counter() - start,
            }
        )
    ring_bytes = (PREFETCH + 2) * BATCH * (3 * SIZE * SIZE * 4 + 8)  # the prefetch budget: the ring
    print(
        json.dumps(
            {"baseline_kb": baseline, "ring_bytes": ring_bytes, "epochs": per_epoch, "errors": len(loader.errors())}
        )
    )


if __name__ == "__main__":
    main()
