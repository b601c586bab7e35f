"""The Loader's lifecycle under stress: errors that do not end an epoch, close() from other threads,
fork() with live native threads, and thread creation refused by the kernel. Scenarios that hung or
crashed the process before run in a subprocess with a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import chute

TIMEOUT_S = 120  # generous: a hang fails the test, a loaded machine does not


def run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child process hung: {e.stderr!r}")


@pytest.fixture()
def bad_every_tenth(tmp_path: Path, folder: Path) -> tuple[Path, set[int]]:
    """The shared 36-image folder with samples 3, 4 (one batch of 8) and 20 emptied."""
    root = tmp_path / "broken"
    shutil.copytree(folder, root)
    files = sorted(root.rglob("*.jpg"))
    bad = {3, 4, 20}
    for i in bad:
        files[i].write_bytes(b"")
    return root, bad


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_next_after_a_sample_error_goes_on_like_torch(bad_every_tenth, device):
    root, bad = bad_every_tenth
    loader = chute.Loader(
        chute.ImageFolder(root), batch_size=8, transforms=[chute.CenterCrop(16)], num_threads=2, device=device
    )
    it = iter(loader)
    labels, errors = [], []
    for _ in range(100):  # bounded: an iterator that never ends fails below
        try:
            _, y = next(it)
        except chute.SampleError as e:
            errors.append(e.index)
            continue
        except StopIteration:
            break
        labels.append(y.cpu().clone())  # (a sim device batch is host memory: keep a copy, not its buffer)
    # torch's DataLoader: a batch whose fetch raised is lost, the next call returns the next batch.
    assert errors == [3, 20]  # one error per failed batch: [0, 8) and [16, 24)
    targets = chute.ImageFolder(root).targets
    kept = [i for i in range(36) if not 0 <= i < 8 and not 16 <= i < 24]
    assert torch.cat(labels).tolist() == [targets[i] for i in kept]
    with pytest.raises(StopIteration):
        next(it)
    loader.close()


def test_iterating_a_closed_loader_raises(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(16)], num_threads=2)
    it = iter(loader)
    next(it)
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(it)  # not StopIteration: the epoch did not end
    with pytest.raises(RuntimeError, match="closed"):
        iter(loader)
    loader.close()  # idempotent


def test_close_from_another_thread_during_iteration_raises_in_the_iterating_thread(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=2, transforms=[chute.CenterCrop(16)], num_threads=2)
    got_first, closed = threading.Event(), threading.Event()
    outcome = []

    def consume():
        n = 0
        try:
            for _ in loader:
                n += 1
                if n == 1:
                    got_first.set()
                    assert closed.wait(TIMEOUT_S)
            outcome.append(("ended", n))
        except RuntimeError as e:
            outcome.append(("raised", str(e)))

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert got_first.wait(TIMEOUT_S)
    loader.close()
    closed.set()
    t.join(TIMEOUT_S)
    assert not t.is_alive()
    assert outcome and outcome[0][0] == "raised" and "closed" in outcome[0][1], outcome


def test_concurrent_close_from_four_threads_returns_in_each(folder):
    r = run_child(
        """
import sys, threading, chute
for trial in range(5):
    loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(16)],
                          num_threads=2, prefetch=4)
    next(iter(loader))
    barrier, errors = threading.Barrier(4), []
    def close():
        barrier.wait()
        try:
            loader.close()
        except Exception as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=close, daemon=True) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join(60)
    assert not any(t.is_alive() for t in threads), "close() hung"
    assert not errors, errors
    del loader  # __del__ after close: nothing left to do
print("ok")
""",
        str(folder),
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_fork_with_a_live_loader_child_exits_and_cannot_use_it(folder):
    r = run_child(
        """
import os, sys, chute
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(16)],
                      num_threads=3, prefetch=4)
it = iter(loader)
held = next(it)  # the workers are busy filling buffers when the fork happens
pid = os.fork()
if pid == 0:
    code = 0
    try:
        next(it)
        code = 3
    except RuntimeError as e:
        code = 0 if "fork()" in str(e) else 4
    try:
        iter(loader)
        code = code or 5
    except RuntimeError as e:
        code = code or (0 if "fork()" in str(e) else 6)
    loader.close()
    sys.exit(code)  # runs the finalisers: the loader and the held batch go here
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert sum(x.shape[0] for x, _ in it) == 32  # the parent's epoch is untouched
print("ok")
""",
        str(folder),
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_multiprocessing_fork_and_torch_workers_keep_working_beside_a_live_loader(folder):
    r = run_child(
        """
import multiprocessing as mp, sys, torch, chute
from torch.utils.data import DataLoader
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(16)],
                      num_threads=2, prefetch=4)
it = iter(loader)
next(it)
def square(x):
    return x * x
with mp.get_context("fork").Pool(2) as pool:
    assert pool.map(square, range(6)) == [0, 1, 4, 9, 16, 25]
torch_loader = DataLoader(list(range(8)), batch_size=4, num_workers=2, multiprocessing_context="fork")
assert [b.tolist() for b in torch_loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
assert sum(x.shape[0] for x, _ in it) == 32
print("ok")
""",
        str(folder),
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


# The kernel refuses threads: a Loader of 64 threads as user nobody (root ignores RLIMIT_NPROC) with
# RLIMIT_NPROC leaving room for no thread or for 3. Files the child reads are made readable to nobody.
LIMITED = """
import os, resource, sys, torch, chute
torch.set_num_threads(1)
# chute.DataLoader loads on first use (lazy imports): load it now, before limit() drops to user nobody, who may
# not read the modules' folders.
chute.DataLoader
root, which = sys.argv[1], sys.argv[2]
def limit():
    if which in ("nproc", "nproc+3"):
        if os.getuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        # Every thread of the user counts; this process's own are all of nobody's here.
        allowed = 1 if which == "nproc" else len(os.listdir("/proc/self/task")) + 3
        resource.setrlimit(resource.RLIMIT_NPROC, (allowed, allowed))
"""


@pytest.fixture()
def readable_folder(folder: Path) -> Path:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="chute-limits-"))
    shutil.copytree(folder, root / "f")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755)
    yield root / "f"
    shutil.rmtree(root)


def test_no_thread_allowed_is_a_runtime_error_naming_the_limit(readable_folder):
    r = run_child(
        LIMITED
        + """
source = chute.ImageFolder(root)
limit()
try:
    chute.Loader(source, batch_size=4, transforms=[chute.CenterCrop(16)], num_threads=64)
    print("started")
except RuntimeError as e:
    print("error:", e)
""",
        str(readable_folder),
        "nproc",
    )
    if r.returncode != 0 and "Operation not permitted" in r.stderr:
        pytest.skip("cannot become user nobody to set RLIMIT_NPROC")
    assert r.returncode == 0, r.stderr[-3000:]  # before: "terminate called without an active exception"
    assert r.stdout.startswith("error:") and "chute-worker" in r.stdout and "ulimit -u" in r.stdout, r.stdout


def test_few_threads_allowed_runs_with_those_it_got_and_says_so_once(readable_folder):
    r = run_child(
        LIMITED
        + """
source = chute.ImageFolder(root)
limit()
loader = chute.Loader(source, batch_size=4, transforms=[chute.CenterCrop(16)], num_threads=64)
n = sum(x.shape[0] for x, _ in loader) + sum(x.shape[0] for x, _ in loader)
print(loader.num_threads, n)
""",
        str(readable_folder),
        "nproc+3",
    )
    if r.returncode != 0 and "Operation not permitted" in r.stderr:
        pytest.skip("cannot become user nobody to set RLIMIT_NPROC")
    assert r.returncode == 0, r.stderr[-3000:]
    threads, n = map(int, r.stdout.split())
    assert 1 <= threads <= 3 and n == 72
    assert r.stderr.count("chute: the loader runs with") == 1 and "ulimit -u" in r.stderr, r.stderr


def test_tensor_fast_path_runs_under_a_thread_limit(readable_folder):
    r = run_child(
        LIMITED
        + """
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.arange(64 * 5, dtype=torch.float32).view(64, 5), torch.arange(64))
ref = list(DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3)))
limit()
fast = chute.DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
got = list(fast)
assert fast.stats()["path"] == "fast:tensor", fast.stats()["path"]
assert len(got) == len(ref) and all(torch.equal(a, b) for g, r in zip(got, ref) for a, b in zip(g, r))
print("ok")
""",
        str(readable_folder),
        "nproc",
    )
    if r.returncode != 0 and "Operation not permitted" in r.stderr:
        pytest.skip("cannot become user nobody to set RLIMIT_NPROC")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    assert r.stderr.count("the tensor gather runs with 0 of") == 1, r.stderr


@pytest.mark.parametrize("allowed", ["nproc", "nproc+3"])
def test_pack_under_a_thread_limit_names_the_limit_or_packs(readable_folder, allowed):
    out = readable_folder.parent / f"packed-{allowed}"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    r = run_child(
        LIMITED
        + """
from chute import packed
limit()
try:
    summary = packed.pack(root, sys.argv[3], num_threads=8)
    print("packed", summary.samples)
except RuntimeError as e:
    print("error:", e)
""",
        str(readable_folder),
        allowed,
        str(out),
    )
    if r.returncode != 0 and "Operation not permitted" in r.stderr:
        pytest.skip("cannot become user nobody to set RLIMIT_NPROC")
    assert r.returncode == 0, r.stderr[-3000:]  # before: "Resource temporarily unavailable", or terminate
    if allowed == "nproc":  # no reader thread: an error that names the limit
        assert r.stdout.startswith("error:") and "chute-pack" in r.stdout and "ulimit -u" in r.stdout, r.stdout
    else:  # a few: the pack completes on those, and says so once
        assert r.stdout.strip() == "packed 36", (r.stdout, r.stderr)
        assert r.stderr.count("chute pack: reading on") == 1, r.stderr


def test_a_huge_thread_count_is_a_value_error_not_a_machine_full_of_threads(folder):
    with pytest.raises(ValueError, match=r"100000 exceeds 4096 threads"):
        chute.Loader(chute.ImageFolder(folder), batch_size=2, transforms=[chute.CenterCrop(8)], max_threads=100000)
