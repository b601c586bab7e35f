"""Ctrl-C against a server that stalls: SIGINT to a child process (interrupt_child.py) in chute.open of a
remote packed dataset (its index fetch) and of a tar (its whole fetch), in an epoch, and in close(). Each
raises KeyboardInterrupt promptly, and leaves no partial entry and no temporary file in the cache. Before
the engine could cancel a transfer, Ctrl-C waited for the retry budget: minutes against a stalled server.

The bound asserted (INTERRUPT_BOUND_S) is generous for a loaded machine; the stall it interrupts would last
at least the engine's stall timeout (30 s) times its attempts."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.object_server import ObjectServer

import chute

CHILD = Path(__file__).with_name("interrupt_child.py")
INTERRUPT_BOUND_S = 10.0
START_TIMEOUT_S = 120.0  # the child imports torch and chute: slow on a loaded machine


@pytest.fixture(scope="module")
def packed(tmp_path_factory, folder) -> dict[str, bytes]:
    """A packed dataset of `folder`'s 36 images in several shards: {file name: bytes}."""
    out = tmp_path_factory.mktemp("packed")
    summary = chute.pack(folder, out, shard_size=64 << 10, num_threads=1)
    assert summary.shards >= 3, summary
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def run_child(stage: str, url: str, cache_dir: Path, signal_after_s: float) -> dict[str, str]:
    """Starts the child, sends SIGINT `signal_after_s` after it says READY, and returns its lines by first
    word (with "interrupt_s": the parent's own time from SIGINT to INTERRUPTED). Every wait is bounded: a
    child that does not answer in time is killed."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), stage, url, str(cache_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    said: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [said.put(line) for line in proc.stdout], daemon=True).start()
    lines: dict[str, str] = {}
    sent = 0.0
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while "CACHE" not in lines:
            try:
                line = said.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                break
            word, _, rest = line.strip().partition(" ")
            lines[word] = rest
            if word == "READY":
                time.sleep(signal_after_s)
                proc.send_signal(signal.SIGINT)
                sent = time.monotonic()
                deadline = sent + INTERRUPT_BOUND_S
            if word == "INTERRUPTED":
                lines["interrupt_s"] = f"{time.monotonic() - sent:.3f}"
                deadline = time.monotonic() + INTERRUPT_BOUND_S + 30  # close() (bounded too), the dataset's end
    finally:
        proc.kill()
        proc.wait()
    assert "INTERRUPTED" in lines, (
        f"no KeyboardInterrupt within {INTERRUPT_BOUND_S} s of SIGINT ({stage}); child said {lines}, stderr:\n"
        + proc.stderr.read()[-3000:]
    )
    return lines


def assert_clean(lines: dict[str, str], allowed=()) -> None:
    """No temporary file, and no entry but those `allowed` (complete ones fetched before the stall)."""
    assert "CACHE" in lines, f"the child did not finish cleaning up: {lines}"
    files = json.loads(lines["CACHE"])
    assert not [f for f in files if f.endswith(".tmp")], files
    entries = [f for f in files if f.endswith(".shard")]
    assert all(any(a in f for a in allowed) for f in entries), entries


@pytest.mark.parametrize("how", ["head", "body"], ids=["no-answer", "stalled-body"])
def test_ctrl_c_during_chute_open_of_a_packed_dataset(tmp_path, packed, how):
    with ObjectServer() as server:
        for name, data in packed.items():
            server.put(f"/ds/{name}", data)
        server.stall("/ds/", how)  # the index's stat (no answer) or its download (headers, then nothing)
        lines = run_child("open", server.url + "/ds/", tmp_path / "cache", signal_after_s=0.5)
    assert "OPENED" not in lines
    assert float(lines["interrupt_s"]) < INTERRUPT_BOUND_S
    assert_clean(lines)


def test_ctrl_c_during_the_fetch_of_a_remote_tar(tmp_path):
    with ObjectServer() as server:
        server.put("/t/a.tar", os.urandom(3 << 20))
        server.stall("/t/", "body")
        lines = run_child("open-tar", server.url + "/t/a.tar", tmp_path / "cache", signal_after_s=0.5)
    assert float(lines["interrupt_s"]) < INTERRUPT_BOUND_S
    assert_clean(lines)


def test_ctrl_c_during_an_epoch_then_close_is_prompt(tmp_path, packed):
    with ObjectServer() as server:
        for name, data in packed.items():
            server.put(f"/ds/{name}", data)
        server.stall("/ds/shard", "body")  # the index comes; every shard stalls mid-body
        lines = run_child("epoch", server.url + "/ds/", tmp_path / "cache", signal_after_s=0.5)
    assert float(lines["interrupt_s"]) < INTERRUPT_BOUND_S
    assert "CLOSED" in lines, f"close() did not return within {INTERRUPT_BOUND_S + 30} s of Ctrl-C: {lines}"
    assert float(lines["CLOSED"]) < INTERRUPT_BOUND_S
    assert_clean(lines, allowed=("index",))


def test_ctrl_c_during_close(tmp_path, packed):
    with ObjectServer() as server:
        for name, data in packed.items():
            server.put(f"/ds/{name}", data)
        server.stall("/ds/shard", "head")
        lines = run_child("close", server.url + "/ds/", tmp_path / "cache", signal_after_s=0.0)
    # SIGINT came during close() (or just after it): either way close() ended and Ctrl-C was raised promptly.
    assert float(lines["interrupt_s"]) < INTERRUPT_BOUND_S
    assert "CACHE" in lines, lines
    assert_clean(lines, allowed=("index",))
