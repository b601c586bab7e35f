"""Shutdown from every place a training job stops: early break, del, an exception in the consumer,
Ctrl-C mid-epoch, and interpreter exit with a live loader. Each runs in a process of its own
(shutdown_child.py) while the loader's two threads are busy prefetching 38 MB float32 batches (16 x 3 x 448 x 448)
of large JPEGs. Each must finish within 1 s and leave no chute-worker thread, no new file descriptor, no shared
memory (mapped, or its own file in /dev/shm) and no batch buffer still resident.

At interpreter exit the time measured is the loader's own shutdown (its __del__, which closes it and
joins the threads) when the teardown reaches it. The process as a whole takes 1-3 s longer to go on this
machine whether or not a loader is live: that is `import torch`'s teardown (a script that only imports
torch takes as long), which chute cannot shorten; the table prints both.

`python python/tests/test_shutdown.py` prints the timings as a table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

HERE = Path(__file__).resolve().parent
SLOT_BYTES = 16 * 3 * 448 * 448 * 4  # shutdown_child.py's batch buffers
SCENARIOS = ["break", "del", "exception", "sigint", "exit"]
LIMIT_S = 1.0


def make_dataset(root: Path) -> Path:
    """256 samples: 8 distinct 1024x768 noisy JPEGs (slow to decode), hard-linked under many names."""
    rng = np.random.default_rng(0)
    (root / "c").mkdir(parents=True)
    originals = []
    for i in range(8):
        path = root / f"orig_{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (768, 1024, 3), dtype=np.uint8)).save(path, quality=95)
        originals.append(path)
    for i in range(256):
        os.link(originals[i % 8], root / "c" / f"{i:03d}.jpg")
    return root


def run_scenario(root: Path, scenario: str) -> dict:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "shutdown_child.py"), str(root), scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if scenario.startswith("exit"):
            line = proc.stdout.readline()  # printed just before the interpreter starts to exit
            proc.wait(timeout=30)
            exit_at = json.loads(line)["exit_at"]
            stderr = proc.stderr.read()
            gone = time.time()
            dels = [[float(v) for v in x.split()[-2:]] for x in stderr.splitlines() if x.startswith("loader __del__")]
            stderr = "\n".join(x for x in stderr.splitlines() if not x.startswith("loader __del__"))
            assert len(dels) == 1, f"the loader was not finalised at exit: {stderr}"
            # elapsed_s: the loader's shutdown at exit; after_del_s: from then until the process is gone
            result = {
                "elapsed_s": dels[0][1] - dels[0][0],
                "process_s": gone - exit_at,
                "after_del_s": gone - dels[0][1],
            }
        else:
            out, stderr = proc.communicate(timeout=120)
            result = json.loads(out.strip().splitlines()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait() == 0, stderr
    result["stderr"] = stderr
    # Files the child left in /dev/shm, named after its pid as torch names them (shutdown_child.own_shm).
    result["dev_shm_left"] = [name for name in os.listdir("/dev/shm") if f"_{proc.pid}_" in name]
    return result


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("shutdown"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_shutdown_is_fast_and_leaves_nothing_behind(dataset, scenario):
    r = run_scenario(dataset, scenario)
    print(f"{scenario}: {r['elapsed_s'] * 1000:.0f} ms")
    assert r["elapsed_s"] < LIMIT_S, f"{scenario} took {r['elapsed_s']:.2f} s"
    assert "leaked" not in r["stderr"] and "Traceback" not in r["stderr"], r["stderr"]
    assert r["dev_shm_left"] == []
    if scenario == "exit":
        return  # the process is gone: the parent checked the time, the exit status and /dev/shm
    before, after = r["before"], r["after"]
    assert before["workers"] == 0 and after["workers"] == 0
    assert after["threads"] <= before["threads"]
    assert after["fds"] == before["fds"]
    assert after["dev_shm"] == before["dev_shm"] and after["shared_maps"] == before["shared_maps"] == 0
    # Every batch buffer unmapped: a leaked one (written by the workers) would add 38.5 MB.
    assert after["rss"] - before["rss"] < SLOT_BYTES // 2, (before["rss"], after["rss"])


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = make_dataset(Path(tmp))
        print(
            "| scenario | time to shut down | chute-worker threads after | fds before/after | "
            "RSS after - before (a buffer: 38.5 MB) |"
        )
        print("|---|---|---|---|---|")
        for scenario in SCENARIOS:
            r = run_scenario(root, scenario)
            if scenario == "exit":
                base = run_scenario(root, "exit-baseline")
                print(
                    f"| interpreter exit | {r['elapsed_s'] * 1000:.0f} ms (the loader's __del__ during teardown); "
                    f"script end to process gone {r['process_s']:.2f} s, {base['process_s']:.2f} s with the loader "
                    f"closed before exit (torch's own teardown) | (process gone) | (process gone) | (process gone) |"
                )
            else:
                print(
                    f"| {scenario} | {r['elapsed_s'] * 1000:.0f} ms | {r['after']['workers']} | "
                    f"{len(r['before']['fds'])}/{len(r['after']['fds'])} | "
                    f"{(r['after']['rss'] - r['before']['rss']) / 1e6:+.1f} MB |"
                )


if __name__ == "__main__":
    main()
