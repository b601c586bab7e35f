"""The label-keeping run of test_dropin.py, in a process of its own so that its RSS is the loader's story:
an eval loop that keeps every label tensor (``targets.append(y)``) for 3 epochs, through chute.Loader or
the ImageFolder fast path of chute.DataLoader. Prints one JSON line: the RSS after each epoch, the bytes of
one image batch, and the labels kept.

    python keep_labels_child.py ROOT loader|fastpath
"""

from __future__ import annotations

import json
import sys

import torch

import chute
from chute.bench.pil_reference import as_torchvision

T = as_torchvision()

BATCH, SIZE, EPOCHS = 4, 384, 3


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise KeyError("VmRSS")


def main() -> None:
    root, mode = sys.argv[1], sys.argv[2]
    if mode == "loader":
        # The ring may hold 6 buffers: keeping the labels of 27 batches pinned their images before the fix,
        # which then raised ResourceExhausted.
        batch_bytes = BATCH * (3 * SIZE * SIZE * 4 + 8)
        loader = chute.Loader(
            chute.ImageFolder(root),
            batch_size=BATCH,
            num_threads=2,
            prefetch=2,
            dtype=torch.float32,
            transforms=[chute.Resize((SIZE, SIZE))],
            max_ring_bytes=6 * batch_bytes,
        )
    else:
        dataset = T.ImageFolder(root, transform=T.Compose([T.Resize((SIZE, SIZE)), T.ToTensor()]))
        loader = chute.DataLoader(dataset, batch_size=BATCH)
        assert loader.stats()["path"] == "fast:imagefolder", loader.stats()
    targets, rss, batch_bytes = [], [], 0
    for _ in range(EPOCHS):
        for images, labels in loader:
            batch_bytes = images.numel() * images.element_size()
            targets.append(labels)
        del images, labels
        rss.append(rss_kb())
    print(json.dumps({"rss_kb": rss, "batch_bytes": batch_bytes, "labels": torch.cat(targets).tolist()}))


if __name__ == "__main__":
    main()
