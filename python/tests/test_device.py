"""GPU delivery: device='sim' (the simulated device, which checks the slot-reuse protocol as it runs) end
to end from Python, the clean failure of device='cuda' without a GPU, and, on a GPU, the real thing."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

import chute
from chute.delivery import cuda_availability

HAS_CUDA = cuda_availability()[0] and torch.cuda.is_available()
NORM = chute.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def make(folder, device, **kw):
    kw.setdefault("transforms", [chute.RandomResizedCrop(48), chute.RandomHorizontalFlip()])
    kw.setdefault("batch_size", 5)
    return chute.Loader(chute.ImageFolder(folder), shuffle=True, seed=3, num_threads=2, device=device, **kw)


def epoch(loader):
    return [(x.cpu().clone(), y.cpu().clone()) for x, y in loader]


def assert_clean(loader):
    dev = loader._driver.device
    assert dev.violations == 0, dev.first_violation
    assert dev.copies > 0


@pytest.mark.parametrize("device_prefetch", [1, 2])
def test_sim_delivers_the_cpu_batches(folder, device_prefetch):
    cpu = make(folder, "cpu")
    sim = make(folder, "sim", device_prefetch=device_prefetch)
    assert sim.pin_memory and sim._driver.native.num_slots == device_prefetch + 1
    for _ in range(2):  # two epochs: the device slots cycle many times
        expected, got = epoch(cpu), epoch(sim)
        assert len(got) == len(expected) == len(cpu)
        for (x, y), (ex, ey) in zip(got, expected):
            assert x.dtype == torch.uint8 and torch.equal(x, ex) and torch.equal(y, ey)
    assert_clean(sim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_float_and_normalize_on_the_device_equal_the_cpu_path(folder, dtype, memory_format):
    kw = dict(
        dtype=dtype,
        memory_format=memory_format,
        transforms=[chute.RandomResizedCrop(40), chute.RandomHorizontalFlip(), NORM],
    )
    expected, got = epoch(make(folder, "cpu", **kw)), epoch(make(folder, "sim", **kw))
    for (x, y), (ex, ey) in zip(got, expected, strict=True):
        assert x.dtype == dtype and x.shape == ex.shape
        assert x.is_contiguous(memory_format=memory_format)
        assert torch.equal(x, ex), (x - ex).abs().max()  # the same float32 arithmetic, then one rounding
        assert torch.equal(y, ey)


def test_early_break_state_dict_counts_what_the_consumer_received(folder):
    sim = make(folder, "sim", device_prefetch=2)
    full = epoch(make(folder, "cpu"))
    it = iter(sim)
    next(it), next(it)
    state = sim.state_dict()
    assert state["position"] == 10  # two batches of 5, not the ones copied ahead
    del it
    resumed = make(folder, "sim")
    resumed.load_state_dict(state)
    rest = epoch(resumed)
    assert len(rest) == len(full) - 2
    for (x, y), (ex, ey) in zip(rest, full[2:]):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    # And the broken-off loader runs a complete next epoch.
    assert len(epoch(sim)) == len(sim)
    assert_clean(sim)
    assert_clean(resumed)


def test_sample_errors_arrive_after_the_batches_before_them(tmp_path, folder):
    import shutil

    root = tmp_path / "broken"
    shutil.copytree(folder, root)
    files = sorted(root.rglob("*.jpg"))
    files[7].write_bytes(files[7].read_bytes()[:300])
    loader = chute.Loader(chute.ImageFolder(root), batch_size=2, transforms=[chute.CenterCrop(32)], device="sim")
    seen = 0
    with pytest.raises(chute.SampleError) as info:
        for x, _ in loader:
            seen += x.shape[0]
    assert seen == 6 and info.value.index == 7
    with pytest.raises(chute.SampleError):  # reusable: the next epoch stops there again
        for _ in loader:
            pass
    assert_clean(loader)


def test_keeping_every_device_batch_is_an_error_not_a_hang(folder):
    loader = make(folder, "sim", device_prefetch=1)
    with pytest.raises(RuntimeError, match="held by batches the consumer still references"):
        list(loader)
    assert len(epoch(loader)) == len(loader)  # released: it works again


def test_batches_outlive_the_loader_and_nothing_leaks(folder):
    loader = make(folder, "sim")
    dev = loader._driver.device
    it = iter(loader)
    x, y = next(it)
    kept = x.clone()
    next(it)
    loader.close()
    del it, loader
    gc.collect()
    assert torch.equal(x, kept)  # still valid
    released = threading.Thread(target=lambda batch: batch.clear(), args=([x, y],))  # freed on another thread
    del x, y
    released.start()
    released.join()
    gc.collect()
    assert dev.live_device_bytes == 0 and dev.live_host_bytes == 0
    assert dev.violations == 0, dev.first_violation


@pytest.mark.skipif(HAS_CUDA, reason="runs only without a GPU: a CUDA GPU is present")
def test_cuda_without_a_gpu_is_a_clear_error(folder):
    available, count, why = cuda_availability()
    assert not available and why
    with pytest.raises(ValueError, match="device='cuda' needs libcudart / a CUDA GPU: "):
        make(folder, "cuda")
    with pytest.warns(UserWarning, match="'pin_memory' argument is set as true but no accelerator is found"):
        assert make(folder, "cpu", pin_memory=True).pin_memory is False  # as torch: warned, unpinned
    assert make(folder, "cpu").pin_memory is False  # None: on only where CUDA is
    assert chute._native.cuda_local_cpus(0) == []  # no GPU, no NUMA node: nothing pinned


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(device="tpu"), "device must be"),
        (dict(device="sim", device_prefetch=0), "device_prefetch"),
        (dict(device="sim", max_device_memory=1000), "max_device_memory"),
    ],
)
def test_invalid_device_arguments(folder, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(folder, **kwargs)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_delivers_the_cpu_batches(folder):
    kw = dict(dtype=torch.float32, transforms=[chute.RandomResizedCrop(48), NORM])
    expected = epoch(make(folder, "cpu", **kw))
    loader = make(folder, "cuda", **kw)
    got = []
    for x, y in loader:
        assert x.device.type == "cuda" and y.device.type == "cuda"
        got.append((x.cpu(), y.cpu()))
    for (x, y), (ex, ey) in zip(got, expected, strict=True):
        assert torch.allclose(x, ex, atol=1e-6) and torch.equal(y, ey)
    assert make(folder, "cpu").pin_memory  # None: on where CUDA is


def test_interpreter_exit_with_copies_in_flight_and_a_held_device_batch(folder):
    import subprocess
    import sys

    code = """
import sys, torch, chute
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(32)],
                      num_threads=2, device="sim", device_prefetch=3, dtype=torch.float32)
it = iter(loader)
images, labels = next(it)
print(labels.tolist())
"""
    result = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0, 0, 0, 0]"


# Pinned CPU batches (device='cpu', pin_memory) under the user's own async copies. The simulated device plays
# torch on a GPU with a backlog: streams whose copies complete tens of milliseconds after they are issued,
# tensor.to(non_blocking=True) as copy_to_device(), and torch's caching host allocator (a block freed while
# a copy out of it is pending is lent again only once that copy is done). The loop below is the standard
# `images = images.cuda(non_blocking=True)`, which drops the CPU batch at once.


def _sim_pinned(monkeypatch, sim):
    from chute import delivery

    monkeypatch.setattr(delivery, "host_pinning", lambda pin_memory: delivery.HostBlocks(sim.pinned_block))


def _to_device(sim, t, stream):
    return sim.copy_to_device(t.data_ptr(), t.numel() * t.element_size(), stream), t.numel() * t.element_size()


def _raw(t):
    return t.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()


@pytest.mark.parametrize("prefetch", [1, 2])
@pytest.mark.parametrize("side_stream", [False, True])
def test_pinned_batches_are_not_refilled_under_a_pending_copy(folder, monkeypatch, prefetch, side_stream):
    sim = chute._native.Device.simulated(seed=7, max_delay_us=0)
    current = sim.create_stream(10_000, 30_000)
    side = sim.create_stream(30_000, 60_000)  # lags more than the current stream
    _sim_pinned(monkeypatch, sim)
    kw = dict(batch_size=3, prefetch=prefetch)
    expected = [(x.clone(), y.clone()) for x, y in make(folder, "cpu", pin_memory=False, **kw)]
    loader = make(folder, "cpu", pin_memory=True, **kw)
    assert loader.pin_memory
    copies = []
    for images, labels in loader:
        # Even batches on the current stream, odd ones on the side stream when there is one.
        stream = side if side_stream and len(copies) % 2 else current
        copies.append((_to_device(sim, images, stream), _to_device(sim, labels, stream)))
        del images, labels  # what `images = images.cuda(non_blocking=True)` does to the CPU batch
    sim.synchronize_stream(current)
    sim.synchronize_stream(side)
    assert len(copies) == len(expected) == len(loader)
    for k, (((pi, ni), (pl, nl)), (ex, ey)) in enumerate(zip(copies, expected)):
        assert sim.read_device(pi, ni) == _raw(ex), f"batch {k}: the images the device received are not the batch's"
        assert sim.read_device(pl, nl) == _raw(ey), f"batch {k}: labels"
    assert sim.violations == 0, sim.first_violation
    assert loader._driver.blocks.pool.handed_over == len(loader)
    loader.close()


def test_pinned_batches_are_torch_views_and_close_returns_unused_blocks(folder, monkeypatch):
    sim = chute._native.Device.simulated(seed=1, max_delay_us=0)
    _sim_pinned(monkeypatch, sim)
    loader = make(folder, "cpu", pin_memory=True, batch_size=4, prefetch=2)
    it = iter(loader)
    images, labels = next(it)
    blocks = loader._driver.blocks
    # The images are a view of the lent block, not chute's memory; the labels are pinned too, in a block of
    # their own, so that keeping them holds no image memory.
    assert images.data_ptr() == images.untyped_storage().data_ptr()
    assert labels.untyped_storage().data_ptr() != images.untyped_storage().data_ptr()
    assert labels.untyped_storage().nbytes() < images.untyped_storage().nbytes()
    kept = images.clone()
    loader.close()
    del it
    assert not blocks._blocks  # every block not handed over went back to its allocator
    assert torch.equal(images, kept)  # a handed-over batch stays valid after close


def test_pinned_blocks_count_their_rounded_size_against_max_memory(folder, monkeypatch):
    # torch's caching host allocator (and the simulated one) rounds every block up to a power of two: a batch
    # of 76.8 KB holds a 128 KiB block. max_memory counts the blocks, and stats() shows what each holds.
    budget = 4 * 131072
    kw = dict(batch_size=4, transforms=[chute.RandomResizedCrop(40)], max_memory=budget, dtype=torch.float32)
    plain = make(folder, "cpu", pin_memory=False, **kw)
    size = plain.stats()["batch_buffer_bytes"]
    assert plain.stats()["batch_buffer_held_bytes"] == size  # heap buffers: what they hold is their size
    plain.close()
    sim = chute._native.Device.simulated(seed=2, max_delay_us=0)
    _sim_pinned(monkeypatch, sim)
    loader = make(folder, "cpu", pin_memory=True, **kw)
    batches = [x.clone() for x, _ in loader]
    stats = loader.stats()
    held = stats["batch_buffer_held_bytes"]
    assert stats["batch_buffer_bytes"] == size < held == 1 << (size - 1).bit_length() == 131072
    assert stats["max_prefetch"] + 2 <= budget // held  # not budget // size (6 buffers of the batch's size)
    assert stats["batch_buffers"] * held <= budget
    assert "each holds 0.1 MB: rounded blocks" in str(stats)
    assert len(batches) == len(loader)
    loader.close()


# One CUDA runtime per process, and no stray contexts: a stand-in CUDA (fake_cuda.c) preloaded the way a cu12
# torch loads its runtime. This machine may also have a real libcudart.so.13 on the loader's path, which chute
# used to load beside it.

_FAKE_CUDA_SCRIPT = """
import ctypes, os, sys, threading
ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_GLOBAL)  # the process's runtime (torch's, say)
ctypes.CDLL(sys.argv[2], mode=os.RTLD_NOW | os.RTLD_GLOBAL)  # the driver
import chute
from chute.delivery import cuda_availability
ok, count, why = cuda_availability()
print("available", ok, count, why)
def run():  # on a fresh thread, as workers, deleters and other threads are
    loader = chute.Loader(chute.ImageFolder(sys.argv[3]), batch_size=4, transforms=[chute.CenterCrop(16)],
                          num_threads=2, device="cuda:1")
    loader._driver.native.start_epoch(0)
    loader.close()
t = threading.Thread(target=run)
t.start()
t.join()
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line})
print("maps", maps)
"""


def _build_fake_cuda(tmp_path):
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler to build the stand-in CUDA (scripts/setup.sh installs one)")
    src = __file__.rsplit("/", 1)[0] + "/fake_cuda.c"
    out = {}
    for soname in ("libcudart.so.12", "libcuda.so.1"):
        path = tmp_path / soname
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O1", f'-DFAKE_NAME="{soname}"', f"-Wl,-soname,{soname}", src, "-o", str(path)],
            check=True,
            timeout=120,
        )
        out[soname] = path
    return out


@pytest.mark.skipif(
    torch.version.cuda is not None,
    reason="runs only without a GPU (a CPU torch): a CUDA torch loads its own libcudart at import; "
    "test_gpu_one_libcudart_in_the_process "
    "checks the rule there",
)
def test_one_cuda_runtime_and_no_stray_context(folder, tmp_path):
    import os
    import subprocess
    import sys

    fake = _build_fake_cuda(tmp_path)
    log = tmp_path / "cuda.log"
    env = dict(os.environ, FAKE_CUDA_LOG=str(log))
    env.pop("CHUTE_CUDART", None)
    result = subprocess.run(
        [sys.executable, "-c", _FAKE_CUDA_SCRIPT, str(fake["libcudart.so.12"]), str(fake["libcuda.so.1"]), str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["available"].startswith("True 2"), lines["available"]  # the preloaded runtime's answer
    assert lines["maps"] == repr([str(fake["libcudart.so.12"])]), "a second libcudart was loaded: " + lines["maps"]
    calls = log.read_text().split("\n") if log.exists() else []
    calls = [c for c in calls if c]
    assert "cudaSetDevice 0" not in calls, "a thread was 'restored' to device 0, creating its context"
    assert [c for c in calls if c.startswith("cudaSetDevice")] == []
    assert set(calls) == {"retain 1"}, calls  # only the device the loader was given


# On a GPU (bench/gpu_check.sh runs these and counts a skip as a failure): the same rules with real CUDA.


def _libcudart_mappings():
    return sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line})


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gpu_one_libcudart_in_the_process(folder):
    torch.zeros(1, device="cuda")  # torch's runtime, initialised
    loader = make(folder, "cuda")
    x, _ = next(iter(loader))
    assert x.device.type == "cuda"
    maps = _libcudart_mappings()
    assert len(maps) == 1, f"two CUDA runtimes in one process: {maps}"
    assert chute._native.loaded_cudart_paths() == maps or len(chute._native.loaded_cudart_paths()) == 1


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("prefetch", [1, 2])
@pytest.mark.parametrize("side_stream", [False, True])
def test_gpu_pinned_batches_under_a_lagging_stream(folder, prefetch, side_stream):
    # Section 1's corruption scenario on the real thing: the copy queues behind a long kernel
    # (torch.cuda._sleep), the CPU batch is dropped at once, and workers keep filling.
    kw = dict(batch_size=3, prefetch=prefetch)
    expected = [(x.clone(), y.clone()) for x, y in make(folder, "cpu", pin_memory=False, **kw)]
    loader = make(folder, "cpu", pin_memory=True, **kw)
    assert loader.pin_memory
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    got = []
    with torch.cuda.stream(stream):
        for images, labels in loader:
            assert images.is_pinned()
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU backlog before each copy
            images = images.to("cuda", non_blocking=True)
            labels = labels.to("cuda", non_blocking=True)
            got.append((images, labels))
    torch.cuda.synchronize()
    assert len(got) == len(expected)
    for k, ((x, y), (ex, ey)) in enumerate(zip(got, expected)):
        assert torch.equal(x.cpu(), ex), f"batch {k} was overwritten under its copy"
        assert torch.equal(y.cpu(), ey)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gpu_cuda_batches_match_the_cpu_loader_on_a_side_stream_in_bf16(folder):
    kw = dict(
        dtype=torch.bfloat16,
        transforms=[chute.RandomResizedCrop(48), chute.RandomHorizontalFlip(), NORM],
        memory_format=torch.channels_last,
    )
    expected = epoch(make(folder, "cpu", **kw))
    side = torch.cuda.Stream()
    got = []
    with torch.cuda.stream(side):
        for x, y in make(folder, "cuda", **kw):
            torch.cuda._sleep(10_000_000)  # the consumer's stream lags: the copy must still come first
            got.append((x * 1, y * 1))  # work on the side stream, after the wait chute put there
    torch.cuda.synchronize()
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert x.dtype == torch.bfloat16 and x.is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(x.float().cpu(), ex.float(), rtol=2**-7, atol=2**-7), (
            (x.float().cpu() - ex.float()).abs().max()
        )
        assert torch.equal(y.cpu(), ey)
