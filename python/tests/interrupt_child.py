"""Run by test_remote_interrupt.py in a child process: one remote operation against a server that stalls,
which the parent interrupts with SIGINT (Ctrl-C). It prints, one line each:

    READY                    about to block (the parent sends SIGINT after this)
    INTERRUPTED <s>          KeyboardInterrupt caught, <s> seconds after READY
    CLOSED <s>               (epoch and close stages) loader.close() returned after <s> seconds
    CACHE <json>             the cache directory's files once everything is gone

usage: interrupt_child.py STAGE URL CACHE_DIR
  open       chute.open(URL) of a packed dataset: its index fetch stalls
  open-tar   chute.open(URL) of a tar: its whole-tar fetch stalls
  epoch      iterating a loader over URL: the shard fetches stall; then close()
  close      close() of a loader whose shard fetches stall
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time


def main() -> None:
    stage, url, cache_dir = sys.argv[1:4]
    import chute
    from chute import remote

    remote.configure(max_retries=8)  # the default budget: minutes against a stalled server
    ready = 0.0

    def say(*words) -> None:
        print(*words, flush=True)

    def start() -> None:
        nonlocal ready
        ready = time.monotonic()
        say("READY")

    dataset = loader = batches = None
    try:
        if stage in ("open", "open-tar"):
            start()
            dataset = chute.open(url, cache_dir=cache_dir)
            say("OPENED")  # not expected: the server never answers
        else:
            dataset = chute.open(url, cache_dir=cache_dir)
            loader = chute.Loader(
                dataset, batch_size=4, order="shards", shard_window=2, num_threads=2, transforms=[chute.CenterCrop(32)]
            )
            batches = iter(loader)
            if stage == "epoch":
                start()
                next(batches)
                say("BATCH")  # not expected
            else:
                time.sleep(0.5)  # the workers are blocked on the stalled shards
                start()
                t = time.monotonic()
                loader.close()
                say("CLOSED", f"{time.monotonic() - t:.3f}")
                time.sleep(60)  # Ctrl-C lands here when close() was quicker than the signal
    except KeyboardInterrupt:
        say("INTERRUPTED", f"{time.monotonic() - ready:.3f}")
    if loader is not None and stage == "epoch":
        t = time.monotonic()
        loader.close()
        say("CLOSED", f"{time.monotonic() - t:.3f}")
    del batches, loader, dataset
    gc.collect()  # the dataset's prefetches end with it
    files = sorted(os.listdir(os.path.join(cache_dir, "shards"))) if os.path.isdir(cache_dir) else []
    say("CACHE", json.dumps(files))


if __name__ == "__main__":
    main()
