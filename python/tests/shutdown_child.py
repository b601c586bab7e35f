"""One shutdown scenario in a process of its own (run by test_shutdown.py): it snapshots the process's
threads, descriptors, shared memory and batch-buffer mappings, runs the scenario, and prints a JSON line
with the time from the trigger (break, del, raise, SIGINT) until the loader is gone and its threads have
left /proc, and the snapshot after. The interpreter-exit scenario is timed by the parent.

    python shutdown_child.py ROOT SCENARIO
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import torch

import chute

# 16 x 3 x 448 x 448 float32: 38.5 MB per buffer, above glibc's largest mmap threshold (32 MB), so every
# buffer is a mapping of its own, unmapped when freed: a leaked (written) buffer shows as 38.5 MB of RSS.
BATCH, SIZE = 16, 448
SLOT_BYTES = BATCH * 3 * SIZE * SIZE * 4


def snapshot() -> dict:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used
            pass
    with open("/proc/self/maps") as f:
        shared = sum("/dev/shm" in line or "memfd:" in line for line in f)
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {
        "workers": names.count("chute-worker"),
        "threads": len(names),
        "fds": fds,
        "dev_shm": own_shm(),
        "shared_maps": shared,
        "rss": rss,
    }


def own_shm() -> list[str]:
    """/dev/shm is the machine's: other processes' files come and go. A file this process left there is
    still open or mapped (both checked) or, torch's way, named after its pid."""
    return sorted(name for name in os.listdir("/dev/shm") if f"_{os.getpid()}_" in name)


def make_loader(root: str) -> chute.Loader:
    return chute.Loader(
        chute.ImageFolder(root),
        batch_size=BATCH,
        num_threads=2,
        prefetch=4,
        dtype=torch.float32,
        transforms=[chute.RandomResizedCrop(SIZE), chute.RandomHorizontalFlip()],
    )


def wait_for_workers_to_leave(deadline_s: float = 10.0) -> None:
    """A joined thread leaves /proc/self/task a moment after join() returns."""
    end = time.perf_counter() + deadline_s
    while snapshot()["workers"] and time.perf_counter() < end:
        time.sleep(0.001)


def warm_up(root: str) -> None:
    """torch's and chute's lazily created state exists before the first snapshot."""
    with make_loader(root) as loader:
        for _x, _y in loader:
            break


def main() -> None:
    root, scenario = sys.argv[1], sys.argv[2]
    warm_up(root)
    before = snapshot()
    t0 = 0.0

    if scenario == "break":

        def train():
            nonlocal t0
            for _x, _y in make_loader(root):
                t0 = time.perf_counter()
                break  # the loader goes out of scope when train() returns

        train()
    elif scenario == "del":
        loader = make_loader(root)
        for x, y in loader:  # noqa: B007 (the batch is used after the loop)
            break
        t0 = time.perf_counter()
        del loader
        float(x[-1, -1, -1, -1])  # the batch stays valid after its loader is gone (no torch op: it may start threads)
        del x, y
    elif scenario == "exception":

        def train():
            nonlocal t0
            for _x, _y in make_loader(root):
                t0 = time.perf_counter()
                raise ValueError("loss is nan")

        try:
            train()
        except ValueError:
            pass
    elif scenario == "sigint":
        # SIGINT mid-epoch, while the consumer waits for a batch: the epoch's 16 batches of large JPEGs take
        # the two threads several seconds.
        # Python leaves SIGINT ignored when its parent ignored it (a job started with & by a script).
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def interrupt():
            nonlocal t0
            t0 = time.perf_counter()
            os.kill(os.getpid(), signal.SIGINT)

        try:
            with make_loader(root) as loader:
                it = iter(loader)
                next(it)
                threading.Timer(0.2, interrupt).start()
                for images, labels in it:
                    del images, labels  # hold no batch when the signal lands: a held one stays valid
            raise AssertionError("no KeyboardInterrupt")
        except KeyboardInterrupt:
            pass
    elif scenario in ("exit", "exit-baseline"):
        global _exit_state  # module globals: the interpreter's teardown, not main()'s return, frees them
        loader = make_loader(root)
        it = iter(loader)
        images, labels = next(it)  # threads busy prefetching; the interpreter now exits with all of it live
        if scenario == "exit-baseline":  # the same process without a live loader: torch's own exit time
            del it, images, labels
            loader.close()
        # Time the loader's own shutdown (its __del__ closes it, joining the threads) when the interpreter's
        # teardown reaches it; reported on stderr, with what the module teardown may still use bound now.
        write, clock, original = os.write, time.time, chute.Loader.__del__

        def timed_del(self):
            start = clock()
            original(self)
            write(2, b"loader __del__ %.6f %.6f\n" % (start, clock()))

        chute.Loader.__del__ = timed_del
        _exit_state = (loader, it if scenario == "exit" else None)
        print(json.dumps({"exit_at": time.time()}), flush=True)
        return
    else:
        raise SystemExit(f"unknown scenario {scenario}")

    wait_for_workers_to_leave()
    elapsed = time.perf_counter() - t0
    print(json.dumps({"elapsed_s": elapsed, "before": before, "after": snapshot()}), flush=True)


if __name__ == "__main__":
    main()
