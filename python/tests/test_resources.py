"""Resource limits are the machine talking, not the sample (issue 16, sections 1, 3 and 5).

- Out of file descriptors (a real RLIMIT_NOFILE), EIO (the faulty_read.c shim) and std::bad_alloc (a real
  RLIMIT_AS) are retried with backoff, then raise chute.ResourceError naming the limit, under
  on_error='skip' too; nothing is skipped or quarantined. A transient failure costs nothing.
- A file over max_file_bytes is a bad sample, refused before it is read.
- Decode memory is charged to max_memory: two workers on 8000x8000 PNGs (192 MB each decoded) stay
  within max_memory plus a stated constant.
- An integer prefetch that max_memory cannot hold is lowered, with one warning.

Each limit is set in a child process, so that this process keeps its descriptors and address space.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import bad_inputs
import pytest

HERE = Path(__file__).resolve().parent
# Where the chute this test imports lives: the installed package (scripts/test.sh), or a source tree on
# PYTHONPATH. Children import the same one.
PYTHON_DIR = Path(importlib.util.find_spec("chute").origin).resolve().parent.parent
CHILD_TIMEOUT = 300  # generous: a bound that fails a hung child, never a timing claim


def _folder(root: Path, n: int = 10) -> list[Path]:
    """n good JPEGs, one class each (label == index)."""
    files = []
    for i in range(n):
        path = bad_inputs.sample_path(root, i)
        path.parent.mkdir(parents=True)
        path.write_bytes(bad_inputs.good_jpeg(100 + i))
        files.append(path)
    return files


def _child(code: str, *args: str, env: dict | None = None) -> dict:
    """Runs `code` in a fresh interpreter that imports this worktree's chute; returns the JSON it printed
    last. A child killed by a signal (std::terminate, SIGBUS) fails the test with its stderr."""
    full_env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PYTHON_DIR), os.environ.get("PYTHONPATH")]))
    )
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=CHILD_TIMEOUT,
    )
    assert out.returncode == 0, f"child exited with {out.returncode}:\n{out.stderr[-4000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


# Iterates one epoch with on_error='skip' and a quarantine file; reports what happened.
_RUN_EPOCH = """
    import json, os, sys
    import chute

    def run(loader):
        result = {"delivered": 0, "error": None, "type": None, "is_oserror": False}
        try:
            for images, labels in loader:
                result["delivered"] += images.shape[0]
        except Exception as e:  # noqa: BLE001  (the test asserts on the type)
            result.update(error=str(e), type=type(e).__name__, is_oserror=isinstance(e, OSError),
                          is_resource=isinstance(e, chute.ResourceError))
        result["skipped"] = len(loader.errors())
        return result
"""


# Child code: opens /dev/null until the process is out of descriptors; returns them (closing them gives back).
FILL_DESCRIPTORS = """
    def fill_descriptors():
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        return held
"""


def test_running_out_of_descriptors_raises_resource_error_and_quarantines_nothing(tmp_path):
    _folder(tmp_path / "data")
    quarantine = tmp_path / "bad.jsonl"
    result = _child(
        _RUN_EPOCH
        + FILL_DESCRIPTORS
        + """
    import resource
    loader = chute.Loader(sys.argv[1], batch_size=4, num_threads=2, on_error="skip", quarantine=sys.argv[2],
                          transforms=[chute.CenterCrop(16)])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
    held = fill_descriptors()
    result = run(loader)
    for fd in held:
        os.close(fd)
    print(json.dumps(result))
    """,
        str(tmp_path / "data"),
        str(quarantine),
    )
    assert result["type"] == "ResourceError", result
    assert result["is_oserror"] and result["is_resource"]
    assert "ulimit -n" in result["error"] and "Too many open files" in result["error"]
    assert "sample 0 (" in result["error"]  # it names the sample it was reading
    assert result["delivered"] == 0 and result["skipped"] == 0
    assert not quarantine.exists() or quarantine.read_text() == ""


def _eio_child(tmp_path: Path, times: int | None, errno_value: int = 5, device: str = "cpu") -> dict:
    files = _folder(tmp_path / "data")
    env = {
        "LD_PRELOAD": str(bad_inputs.faulty_read_library()),
        "CHUTE_FAULTY_READ": str(files[5]),
        "CHUTE_FAULTY_ERRNO": str(errno_value),
    }
    if times is not None:
        env["CHUTE_FAULTY_TIMES"] = str(times)
    return _child(
        _RUN_EPOCH
        + """
    loader = chute.Loader(sys.argv[1], batch_size=4, num_threads=2, on_error="skip", quarantine=sys.argv[2],
                          transforms=[chute.CenterCrop(16)], device=sys.argv[3])
    print(json.dumps(run(loader)))
    """,
        str(tmp_path / "data"),
        str(tmp_path / "bad.jsonl"),
        device,
        env=env,
    )


@pytest.mark.parametrize("errno_name", ["EIO", "EAGAIN", "EINTR"])
def test_a_transient_read_failure_is_retried_and_the_sample_delivered(tmp_path, errno_name):
    import errno

    # EINTR is retried at once by the read loop; EIO and EAGAIN with backoff. Two failures, then the disk answers.
    result = _eio_child(tmp_path, times=2, errno_value=getattr(errno, errno_name))
    assert result["error"] is None, result
    assert result["delivered"] == 10 and result["skipped"] == 0
    quarantine = tmp_path / "bad.jsonl"  # created when the loader is built; nothing written into it
    assert not quarantine.exists() or quarantine.read_text() == ""


@pytest.mark.parametrize("device", ["cpu", "sim"])  # sim: the GPU delivery path, on a simulated device
def test_a_persistent_eio_raises_resource_error_and_is_not_quarantined(tmp_path, device):
    result = _eio_child(tmp_path, times=None, device=device)
    assert result["type"] == "ResourceError", result
    assert "Input/output error" in result["error"] and "sample 5 (" in result["error"]
    assert result["delivered"] == 4 and result["skipped"] == 0  # the batch before it, then the error
    quarantine = tmp_path / "bad.jsonl"  # created when the loader is built; nothing written into it
    assert not quarantine.exists() or quarantine.read_text() == ""


def _big_png(path: Path, size: int) -> None:
    """A size x size RGB PNG of a few hundred KB that decodes to size*size*3 bytes."""
    from PIL import Image

    Image.new("RGB", (size, size), (20, 120, 220)).save(path, compress_level=1)


def test_allocation_failure_on_a_worker_is_an_error_not_an_abort(tmp_path):
    root = tmp_path / "data" / "a"
    root.mkdir(parents=True)
    _big_png(root / "big.png", 8000)  # 192 MB decoded
    result = _child(
        _RUN_EPOCH
        + """
    import resource
    loader = chute.Loader(sys.argv[1], batch_size=1, num_threads=2, on_error="skip",
                          transforms=[chute.Resize(32), chute.CenterCrop(32)])
    def vm_size():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = vm_size() + (96 << 20)  # room for small allocations, not for the decoded image
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    print(json.dumps(run(loader)))
    """,
        str(tmp_path / "data"),
    )
    assert result["type"] == "ResourceError", result
    assert "out of memory" in result["error"] and "big.png" in result["error"]
    assert result["skipped"] == 0


def test_a_file_over_max_file_bytes_is_a_bad_sample_never_read(tmp_path):
    import chute

    files = _folder(tmp_path)
    files[3].write_bytes(files[3].read_bytes() + bytes(100_000))  # trailing bytes: a valid, large JPEG
    loader = chute.Loader(
        tmp_path, batch_size=4, num_threads=2, on_error="skip", max_file_bytes=50_000, transforms=[chute.CenterCrop(16)]
    )
    labels = [y for _, ys in loader for y in ys.tolist()]
    assert labels == [i for i in range(10) if i != 3]
    [error] = loader.errors()
    assert error.index == 3 and "max_file_bytes" in error.reason and "over the limit of 50000" in error.reason
    with pytest.raises(ValueError, match="max_file_bytes"):
        chute.Loader(tmp_path, max_file_bytes=0)


def test_large_decodes_stay_within_max_memory(tmp_path):
    """Two workers, four images of 8000x8000 (192 MB each decoded), max_memory 256 MB: only one decode
    fits at a time. The stated bound: peak RSS growth <= max_memory + 2 x 16 MiB (each worker's uncharged
    scratch) + 32 MiB of slack for allocator and library overhead. Without the admission gate both workers
    decode at once (about 400 MB)."""
    root = tmp_path / "data" / "a"
    root.mkdir(parents=True)
    _big_png(root / "0.png", 8000)
    for i in range(1, 4):
        os.link(root / "0.png", root / f"{i}.png")
    max_memory = 256 << 20
    result = _child(
        """
    import json, resource, sys
    import chute
    loader = chute.Loader(sys.argv[1], batch_size=1, num_threads=2, prefetch=2, max_memory=int(sys.argv[2]),
                          transforms=[chute.Resize(32), chute.CenterCrop(32)])
    with open("/proc/self/statm") as f:
        rss_before = int(f.read().split()[1]) * resource.getpagesize()
    n = sum(x.shape[0] for x, _ in loader)
    # VmHWM: this process image's peak RSS. Not ru_maxrss, which survives execve and so starts at the RSS
    # of the forked parent (pytest, large after earlier tests), which made this bound depend on them.
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    print(json.dumps({"n": n, "growth": peak - rss_before}))
    print(f"peak RSS growth {(peak - rss_before) >> 20} MiB", file=sys.stderr)
    """,
        str(tmp_path / "data"),
        str(max_memory),
    )
    assert result["n"] == 4
    bound = max_memory + 2 * (16 << 20) + (32 << 20)
    assert result["growth"] <= bound, f"peak RSS grew by {result['growth'] >> 20} MiB, over {bound >> 20} MiB"


def test_an_integer_prefetch_beyond_max_memory_is_lowered_with_one_warning(tmp_path):
    import chute

    _folder(tmp_path, 4)
    max_memory = 16 << 20  # 53 batch buffers of 2 x 224 x 224 x 3 bytes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = chute.Loader(
            tmp_path,
            batch_size=2,
            num_threads=1,
            prefetch=10**6,
            max_memory=max_memory,
            transforms=[chute.Resize(224), chute.CenterCrop(224)],
        )
    messages = [str(w.message) for w in caught if "prefetch" in str(w.message)]
    assert len(messages) == 1 and "max_memory" in messages[0], messages
    stats = loader.stats()
    assert loader.prefetch == max_memory // stats["batch_buffer_bytes"] - 2
    assert stats["batch_buffers"] * stats["batch_buffer_bytes"] <= max_memory
    assert sum(x.shape[0] for x, _ in loader) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a prefetch that fits: no warning
        chute.Loader(
            tmp_path,
            batch_size=2,
            num_threads=1,
            prefetch=4,
            max_memory=max_memory,
            transforms=[chute.Resize(224), chute.CenterCrop(224)],
        )


@pytest.mark.parametrize("prefetch", ["auto", 1, 4])
def test_a_batch_buffer_over_max_memory_is_refused_whatever_the_prefetch(tmp_path, prefetch):
    """Issue 36: Resize((6000, 6000)) at batch 1 is a 103 MiB buffer; with max_memory=50 MiB an integer
    prefetch once ran anyway (prefetch=1 silently, prefetch=4 'lowered to 1'), holding 3 such buffers, and
    Resize((30000, 30000)) at batch 4 (10.8 GB a buffer) grew past 5 GB under the default max_memory. Now
    max_memory bounds the ring whatever the prefetch: a ValueError naming both sizes, before any buffer."""
    import chute

    _folder(tmp_path, 2)
    with pytest.raises(ValueError) as e:
        chute.Loader(tmp_path, batch_size=1, transforms=[chute.Resize((6000, 6000))], prefetch=prefetch,
                     max_memory=50 << 20)  # fmt: skip
    assert "max_memory of 50.0 MiB (52428800 bytes) holds fewer than 3 batch buffers of 103.0 MiB" in str(e.value)
    with pytest.raises(ValueError, match=r"max_memory of 2048\.0 MiB .* fewer than 3 batch buffers of 10299\."):
        chute.Loader(tmp_path, batch_size=4, transforms=[chute.Resize((30000, 30000))], prefetch=prefetch)


def test_pack_under_a_thread_limit_names_the_limit_and_leaves_nothing(tmp_path):
    """No address space left for a reader thread's stack: pthread_create fails with EAGAIN, as under
    `ulimit -u` or a cgroup's pids.max (which root cannot be given here). The pack names the limits."""
    _folder(tmp_path / "data", 6)
    dst = tmp_path / "out" / "packed"
    result = _child(
        """
    import json, resource, sys
    import chute
    source = chute.ImageFolder(sys.argv[1])
    with open("/proc/self/status") as f:
        vm_size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm_size + (2 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        chute.pack(source, sys.argv[2], num_threads=4)
        print(json.dumps({"type": None}))
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"type": type(e).__name__, "error": str(e)}))
    """,
        str(tmp_path / "data"),
        str(dst),
    )
    assert result["type"] == "ResourceError", result
    assert "reader thread" in result["error"] and "ulimit -u" in result["error"] and "pids.max" in result["error"]
    assert not dst.exists() or list(dst.iterdir()) == []


def _packed(tmp_path: Path, n: int = 40) -> Path:
    import chute

    _folder(tmp_path / "src", n)
    dst = tmp_path / "packed"
    chute.pack(tmp_path / "src", dst, num_threads=1)
    return dst


def test_a_shard_truncated_while_open_gives_sample_errors_not_sigbus(tmp_path):
    dst = _packed(tmp_path)
    result = _child(
        _RUN_EPOCH
        + """
    from pathlib import Path
    loader = chute.Loader(sys.argv[1], batch_size=4, num_threads=2, on_error="skip",
                          transforms=[chute.CenterCrop(16)])
    shard = sorted(Path(sys.argv[1]).glob("*.chute"))[0]
    os.truncate(shard, 8192)  # someone rewrites the shard in place while the job reads it
    result = run(loader)
    result["reasons"] = sorted({e.reason.split(", record")[0] for e in loader.errors()})
    result["shard"] = str(shard)
    print(json.dumps(result))
    """,
        str(dst),
    )
    assert result["error"] is None, result  # a data error: skipped, the epoch goes on
    assert result["skipped"] > 30 and result["delivered"] == 40 - result["skipped"]
    assert result["reasons"] == [f"IoError: shard {result['shard']}"], result


def test_an_index_truncated_while_open_is_a_fatal_message_naming_it(tmp_path):
    """Reads of the index in place are not guarded (they are everywhere, and cheap): a SIGBUS there still
    ends the process, but stderr names the file first."""
    dst = _packed(tmp_path)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
    import os, sys
    import chute
    dataset = chute.open(sys.argv[1])
    os.truncate(os.path.join(sys.argv[1], "index.chidx"), 0)
    print([dataset._native.name(i) for i in range(len(dataset))])
    """),
            str(dst),
        ],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        env=dict(os.environ, PYTHONPATH=str(PYTHON_DIR)),
    )
    assert out.returncode != 0
    assert f"chute: fatal SIGBUS reading {dst / 'index.chidx'}" in out.stderr, out.stderr[-2000:]


def test_dataloader_out_of_descriptors_names_ulimit(tmp_path):
    result = _child("""
    import json, os, resource
    import torch
    import chute

    class Squares(torch.utils.data.Dataset):  # a plain dataset: the generic path, worker processes
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return torch.tensor([i * i])

    loader = chute.DataLoader(Squares(), batch_size=4, num_workers=2)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 3, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    try:
        batches = len(list(loader))
        print(json.dumps({"type": None, "batches": batches}))
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"type": type(e).__name__, "error": str(e), "is_oserror": isinstance(e, OSError)}))
    """)
    assert result["type"] == "ResourceError", result
    assert result["is_oserror"] and "ulimit -n" in result["error"] and "num_workers" in result["error"]


def test_a_tar_truncated_while_open_gives_sample_errors_not_sigbus(tmp_path):
    import tarfile

    files = _folder(tmp_path / "src", 20)
    tar = tmp_path / "data.tar"
    with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT) as t:
        for i, f in enumerate(files):
            t.add(f, arcname=f"{i:03d}.jpg")
    result = _child(
        _RUN_EPOCH
        + """
    loader = chute.Loader(chute.open(sys.argv[1]), batch_size=4, num_threads=2, on_error="skip",
                          transforms=[chute.CenterCrop(16)])
    os.truncate(sys.argv[1], 8192)
    result = run(loader)
    result["reasons"] = sorted({e.reason.split(":")[0] + ":" + e.reason.split(":")[1] for e in loader.errors()})
    print(json.dumps(result))
    """,
        str(tar),
    )
    assert result["error"] is None, result
    assert result["skipped"] > 10 and result["delivered"] == 20 - result["skipped"]
    assert result["reasons"] == [f"IoError: {tar} shrank while in use"], result
