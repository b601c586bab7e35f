"""fork() while chute's native threads run: workers start as torch starts them, and children work.

torch's DataLoader forks its workers on Linux, so scripts have no ``if __name__ == "__main__":`` guard and
datasets hold lambdas. chute's threads stand still across every fork (ForkGate, fork_gate.h) and its
engines are inert in the child (fork.h), so chute.DataLoader forks too, whatever other chute loaders are
alive, and a forked child can use the allocator, the image libraries and chute itself."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset

import chute

HERE = Path(__file__).parent


@pytest.mark.parametrize("which", ["torch", "chute"])
def test_script_without_main_guard_forks_its_workers_and_finishes(folder, which):
    """A training loader that falls back to workers beside a validation loader on the fast path, epoch after
    epoch, in a script without a main guard: it finishes like torch's, with forked workers."""
    r = subprocess.run(
        [sys.executable, str(HERE / "fork_script_child.py"), str(folder), which],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines.count("start") == 1, r.stdout  # no worker re-ran the script
    assert lines[-1] == "done [36, 36, 36] ['fork']", r.stdout
    assert "forkserver" not in r.stderr, r.stderr


def test_workers_fork_while_native_threads_run(folder):
    """chute's own threads running (a Loader in mid-epoch) do not change how a DataLoader starts workers."""
    with chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(32)]) as busy:
        batches = iter(busy)
        next(batches)  # its threads are filling the next batches
        it = iter(chute.DataLoader(list(range(8)), batch_size=4, num_workers=1))
        assert it._workers[0]._popen.method == "fork"
        assert [b.tolist() for b in it] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    spawned = iter(chute.DataLoader(list(range(8)), batch_size=4, num_workers=1, multiprocessing_context="spawn"))
    assert spawned._workers[0]._popen.method == "spawn"  # a context the user chose is kept
    assert [b.tolist() for b in spawned] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def _child(folder: Path, jpeg: Path, parent_loader) -> int:
    """What a forked child does with the libraries the parent's threads were using; its exit code."""
    code = 0
    try:
        block = np.ones(1 << 24, dtype=np.uint8)  # the allocator: 16 MB, touched
        code |= 1 if int(block[::4096].sum()) != 4096 else 0
        with Image.open(jpeg) as im:  # libjpeg through Pillow
            im.load()
        code |= 2 if torch.ones(64, 64).sum().item() != 4096 else 0
        # The parent's engines are inert here: calls fail clearly, nothing hangs.
        try:
            next(iter(parent_loader))
            code |= 4
        except Exception as e:  # noqa: BLE001
            code |= 0 if "fork()" in str(e) else 8
        # chute itself: a new engine decodes (libjpeg-turbo, its threads, its ring) and gathers.
        with chute.Loader(chute.ImageFolder(folder), batch_size=6, transforms=[chute.CenterCrop(24)]) as mine:
            n = sum(len(labels) for _, labels in mine)
        code |= 16 if n != 36 else 0
        rows = chute.DataLoader(TensorDataset(torch.arange(32.0)), batch_size=8)
        code |= 32 if [b[0].sum().item() for b in rows] != [28.0, 92.0, 156.0, 220.0] else 0
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        code |= 64
    return code


def test_forks_while_a_loader_and_a_gatherer_are_busy(folder):
    """Fork again and again while a chute.Loader decodes and a tensor fast path gathers on native threads:
    every child can allocate, decode, run torch and chute, and exits cleanly, within a deadline."""
    stop = threading.Event()
    errors: list[BaseException] = []
    loader = chute.Loader(
        chute.ImageFolder(folder), batch_size=4, shuffle=True, num_threads=2, transforms=[chute.CenterCrop(48)]
    )
    rows = chute.DataLoader(TensorDataset(torch.randn(4096, 256)), batch_size=512, shuffle=True)
    assert rows.stats()["path"] == "fast:tensor"

    def keep_busy(make_epoch):
        try:
            while not stop.is_set():
                for _ in make_epoch():
                    if stop.is_set():
                        break
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [
        threading.Thread(target=keep_busy, args=(lambda: loader,)),
        threading.Thread(target=keep_busy, args=(lambda: rows,)),
    ]
    for t in threads:
        t.start()
    jpeg = next(folder.rglob("*.jpg"))
    codes = []
    try:
        for _ in range(12):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report, then leave without running the parent's clean-up
                os.close(read_end)
                code = _child(folder, jpeg, loader)
                os.write(write_end, bytes([code]))
                os._exit(code)
            os.close(write_end)
            # The child's end of the pipe closes when it exits: wait for that, with a deadline.
            ready, _, _ = select.select([read_end], [], [], 120)
            if not ready:
                os.kill(pid, signal.SIGKILL)
            reported = os.read(read_end, 1) if ready else b""
            os.close(read_end)
            _, status = os.waitpid(pid, 0)
            codes.append((reported[0] if reported else -1, os.waitstatus_to_exitcode(status)))
    finally:
        stop.set()
        for t in threads:
            t.join()
        loader.close()
    assert not errors, errors
    assert codes == [(0, 0)] * 12, codes  # (-1, ...): a child hung past the deadline
