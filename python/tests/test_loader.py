"""chute.Loader: shapes, order, zero-copy buffers, determinism, errors and lifecycle."""

from __future__ import annotations

import gc
import shutil
import time
from pathlib import Path

import pytest
import torch

import chute

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def train_transforms(size=64):
    return [chute.RandomResizedCrop(size), chute.RandomHorizontalFlip(), chute.Normalize(MEAN, STD)]


def collect(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def test_batches_have_torch_shapes_and_types(folder):
    with chute.Loader(chute.ImageFolder(folder), batch_size=5, transforms=[chute.CenterCrop(96)]) as loader:
        assert len(loader) == 8  # 36 samples
        batches = list(loader)
    assert [x.shape[0] for x, _ in batches] == [5] * 7 + [1]
    x, y = batches[0]
    assert x.shape == (5, 3, 96, 96) and x.dtype == torch.uint8 and x.is_contiguous()
    assert y.dtype == torch.int64 and y.shape == (5,)


def test_sequential_order_and_labels_follow_the_folder(folder):
    source = chute.ImageFolder(folder)
    loader = chute.Loader(source, batch_size=7, transforms=[chute.CenterCrop(32)])
    labels = torch.cat([y for _, y in loader]).tolist()
    assert labels == source.targets
    assert source.targets == sorted(source.targets)


def test_shuffle_is_a_permutation_and_drop_last_drops(folder):
    source = chute.ImageFolder(folder)
    loader = chute.Loader(source, batch_size=5, shuffle=True, drop_last=True, transforms=[chute.CenterCrop(32)])
    assert len(loader) == 7
    counts = torch.bincount(torch.cat([y for _, y in loader]), minlength=3)
    assert counts.sum() == 35
    assert sorted(torch.cat([y for _, y in loader]).tolist()) != torch.cat([y for _, y in loader]).tolist()


def test_float_output_matches_to_tensor_scaling(folder):
    source = chute.ImageFolder(folder)
    u8 = chute.Loader(source, batch_size=6, transforms=[chute.CenterCrop(48)])
    f32 = chute.Loader(source, batch_size=6, transforms=[chute.CenterCrop(48)], dtype=torch.float32)
    for (a, _), (b, _) in zip(u8, f32):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, a.float() / 255, rtol=0, atol=1e-7)


def test_channels_last_is_the_same_image_with_nhwc_strides(folder):
    source = chute.ImageFolder(folder)
    nchw = collect(chute.Loader(source, batch_size=6, transforms=[chute.CenterCrop(40)]))
    nhwc = collect(
        chute.Loader(source, batch_size=6, transforms=[chute.CenterCrop(40)], memory_format=torch.channels_last)
    )
    for (a, _), (b, _) in zip(nchw, nhwc):
        assert torch.equal(a, b)
    x, _ = next(
        iter(chute.Loader(source, batch_size=6, transforms=[chute.CenterCrop(40)], memory_format=torch.channels_last))
    )
    assert x.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_same_seed_same_bytes_whatever_the_thread_count(folder, threads):
    source = chute.ImageFolder(folder)
    kwargs = dict(batch_size=8, shuffle=True, seed=17, transforms=train_transforms(), dtype=torch.float32)
    reference = collect(chute.Loader(source, num_threads=1, **kwargs))
    got = collect(chute.Loader(source, num_threads=threads, **kwargs))
    assert len(got) == len(reference)
    for (a, ya), (b, yb) in zip(reference, got):
        assert torch.equal(ya, yb)
        assert torch.equal(a, b)  # byte-identical


def test_epochs_and_seeds_change_the_batches(folder):
    source = chute.ImageFolder(folder)
    kwargs = dict(batch_size=36, shuffle=True, transforms=train_transforms(), dtype=torch.float32)
    loader = chute.Loader(source, seed=1, **kwargs)
    first = collect(loader)  # epoch 0
    second = collect(loader)  # epoch 1, automatically
    loader.set_epoch(0)
    again = collect(loader)
    assert torch.equal(first[0][0], again[0][0]) and torch.equal(first[0][1], again[0][1])
    assert not torch.equal(first[0][1], second[0][1])
    other_seed = collect(chute.Loader(source, seed=2, **kwargs))
    assert not torch.equal(first[0][1], other_seed[0][1])


def test_tensors_share_recycled_buffers_and_outlive_the_loader(folder):
    source = chute.ImageFolder(folder)
    loader = chute.Loader(source, batch_size=4, transforms=[chute.CenterCrop(32)], prefetch=1)
    pointers = set()
    for _ in range(3):
        for x, _ in loader:
            pointers.add(x.data_ptr())
    assert len(pointers) <= 3  # prefetch + 2 buffers, reused across 27 batches: no copies, no new memory
    x, y = next(iter(loader))
    expected = x.clone()
    loader.close()
    del loader
    gc.collect()
    assert torch.equal(x, expected) and y.tolist() == [0, 0, 0, 0]


def test_stored_batches_never_share_a_buffer(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=2, transforms=[chute.CenterCrop(32)], prefetch=1)
    kept = list(loader)  # the user keeps every batch: the ring must grow, never reuse a live buffer
    assert len({x.data_ptr() for x, _ in kept}) == len(kept) == 18


def test_superseded_iterator_and_closed_loader_raise(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(32)])
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(RuntimeError, match="superseded"):
        next(first)
    assert sum(x.shape[0] for x, _ in second) == 36
    loader.close()
    loader.close()
    with pytest.raises(RuntimeError):
        list(loader)


def test_early_break_then_new_epoch_is_complete(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(32)], prefetch=4)
    for _ in loader:
        break
    assert sum(x.shape[0] for x, _ in loader) == 36


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=2, dtype=torch.float64), "dtype"),
        (dict(batch_size=2, on_error="ignore"), "on_error"),
        (dict(batch_size=2, num_threads=0), "num_threads"),
        (dict(batch_size=2, prefetch=0), "prefetch"),
        (dict(batch_size=2, num_threads="many"), "num_threads"),
        (dict(batch_size=2, prefetch="more"), "prefetch"),
        (dict(batch_size=2, max_threads=0), "max_threads"),
        (dict(batch_size=2, num_threads=4, max_threads=2), "exceeds max_threads"),
        (dict(batch_size=2, max_memory=0), "max_memory"),
        (dict(batch_size=64, transforms=[chute.CenterCrop(64)], max_memory=1 << 20), "fewer than 3 batch buffers"),
        (dict(batch_size=2, transforms=[chute.CenterCrop(8), chute.Normalize(MEAN, STD)]), "floating-point"),
        (dict(batch_size=2, transforms=[chute.Resize(32)]), "one size"),
        (dict(batch_size=2, transforms=[chute.RandomResizedCrop(8), chute.Resize((8, 8))]), "once"),
    ],
)
def test_invalid_arguments_are_clear_errors(folder, kwargs, match):
    with pytest.raises(ValueError, match=match):
        chute.Loader(chute.ImageFolder(folder), **kwargs)


def test_non_chute_transform_and_missing_folder(folder, tmp_path):
    with pytest.raises(TypeError, match="not a chute transform"):
        chute.Loader(chute.ImageFolder(folder), batch_size=2, transforms=[lambda x: x])
    with pytest.raises(FileNotFoundError):
        chute.ImageFolder(tmp_path / "missing")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="Found no valid file"):
        chute.ImageFolder(tmp_path)


def gif_bytes() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(buf, format="GIF")
    return buf.getvalue()


@pytest.fixture()
def broken_folder(tmp_path: Path, folder: Path) -> tuple[Path, dict[int, str]]:
    """The shared folder with bad files planted: (root, {index: kind})."""
    root = tmp_path / "broken"
    shutil.copytree(folder, root)
    files = sorted(root.rglob("*.jpg"))
    good = files[0].read_bytes()
    bad = {
        3: ("truncated", good[: len(good) // 2]),
        8: ("empty", b""),
        9: ("not an image", b"hello, this is text\n" * 10),
        20: ("gif named .jpg", gif_bytes()),
        30: ("corrupt header", b"\xff\xd8\xff\xe0" + b"\x13" * 300 + b"\xff\xd9"),
    }
    for i, (_, data) in bad.items():
        files[i].write_bytes(data)
    return root, {i: kind for i, (kind, _) in bad.items()}


def test_raise_policy_names_the_sample(broken_folder):
    root, bad = broken_folder
    source = chute.ImageFolder(root)
    loader = chute.Loader(source, batch_size=2, transforms=[chute.CenterCrop(32)])
    seen = 0
    with pytest.raises(chute.SampleError) as info:
        for x, _ in loader:
            seen += x.shape[0]
    assert seen == 2  # the batch before the bad sample's batch arrived (next() after the error goes on:
    # test_lifecycle.py)
    err = info.value
    assert err.index == 3 and err.path == source.samples[3][0]
    assert "Premature end" in err.reason and "sample 3 (" in str(err)
    # The loader is reusable; a new epoch stops at the same sample.
    with pytest.raises(chute.SampleError):
        list(loader)


def test_skip_policy_keeps_batches_full_and_records_every_bad_sample(broken_folder):
    root, bad = broken_folder
    source = chute.ImageFolder(root)
    loader = chute.Loader(source, batch_size=4, transforms=[chute.CenterCrop(32)], on_error="skip", num_threads=2)
    batches = list(loader)
    sizes = [x.shape[0] for x, _ in batches]
    assert sizes == [4] * 7 + [3]  # 36 - 5 = 31 samples
    labels = torch.cat([y for _, y in batches]).tolist()
    assert labels == [t for i, t in enumerate(source.targets) if i not in bad]
    errors = loader.errors()
    assert [e.index for e in errors] == sorted(bad)
    assert all(e.path == source.samples[e.index][0] for e in errors)
    reasons = {e.index: e.reason for e in errors}
    assert "empty" in reasons[8]
    assert "not a JPEG, PNG or WebP" in reasons[9] and "GIF images are not supported" in reasons[20]


def test_closed_loaders_leave_no_native_threads(folder):
    import os

    def workers() -> int:  # chute names its threads
        names = []
        for tid in os.listdir("/proc/self/task"):
            try:
                names.append(open(f"/proc/self/task/{tid}/comm").read().strip())
            except FileNotFoundError:  # a thread that just ended
                pass
        return names.count("chute-worker")

    gc.collect()  # loaders of earlier tests that are garbage close their threads now
    before = workers()
    for _ in range(20):
        with chute.Loader(
            chute.ImageFolder(folder), batch_size=3, transforms=[chute.CenterCrop(16)], num_threads=3
        ) as loader:
            assert loader.num_threads == 3
            for _ in loader:
                assert workers() <= before + 3  # (threads may still be starting)
                break
    # close() joined every thread; the kernel drops a joined thread's /proc entry a moment later.
    deadline = time.monotonic() + 30  # generous: a loaded machine delays it, only a leak outlasts it
    while workers() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert workers() == before


def run_script(code: str, *args: str, timeout: float = 60) -> str:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="session")
def slow_folder(tmp_path_factory) -> Path:
    """Large noisy JPEGs: one batch of all of them takes a single thread a good fraction of a second."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("slow") / "only_class"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (1200, 1600, 3), dtype=np.uint8)).save(root / f"{i}.jpg", quality=95)
    return root.parent


def test_ctrl_c_interrupts_a_wait_for_a_slow_batch(slow_folder):
    out = run_script(
        """
import os, signal, sys, threading, time, torch, chute
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python leaves SIGINT ignored if its parent did
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=12, num_threads=1,
                      transforms=[chute.RandomResizedCrop(224)])
t = time.perf_counter(); list(loader); full = time.perf_counter() - t
threading.Timer(full / 10, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t = time.perf_counter()
try:
    list(loader)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted", (time.perf_counter() - t) / full)
loader.close()
""",
        str(slow_folder),
    )
    word, *fraction = out.split()
    assert word == "interrupted"
    assert float(fraction[0]) < 0.5  # handled while waiting, not after the batch arrived


def test_interpreter_exit_with_a_live_loader_and_held_batch(folder):
    out = run_script(
        """
import sys, chute
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(32)],
                      num_threads=2, prefetch=4)
it = iter(loader)
images, labels = next(it)
print(labels.tolist())
""",
        str(folder),
        timeout=30,
    )
    assert out.strip() == "[0, 0, 0, 0]"


def test_benign_decoder_warnings_are_counted_not_fatal(tmp_path, folder):
    """Junk bytes between JPEG segments (common in ImageNet) decode as PIL does, and are counted."""
    import numpy as np
    from PIL import Image

    root = tmp_path / "junk"
    (root / "a").mkdir(parents=True)
    data = next((folder / "class_0").glob("*.jpg")).read_bytes()
    app0_end = 4 + int.from_bytes(data[4:6], "big")
    (root / "a" / "x.jpg").write_bytes(data[:app0_end] + b"\x12\x34\x56" + data[app0_end:])
    with Image.open(root / "a" / "x.jpg") as im:
        expected = np.asarray(im.convert("RGB"))
    h, w = expected.shape[:2]
    loader = chute.Loader(root, batch_size=1, transforms=[chute.CenterCrop((h, w))])
    ((x, _),) = list(loader)
    assert np.array_equal(x[0].permute(1, 2, 0).numpy(), expected)
    assert loader.decode_warnings == 1
    list(loader)
    assert loader.decode_warnings == 2


def test_source_label_and_name_check_the_index(folder):
    native = chute.ImageFolder(folder)._native
    assert native.label(35) == 2 and native.name(0).endswith("img_000.jpg")
    for bad in (36, -1, 1 << 40):
        with pytest.raises(IndexError, match="out of range"):
            native.label(bad)
        with pytest.raises(IndexError, match="out of range"):
            native.name(bad)
