"""Bad arguments and environments are Python errors that name what is wrong and what is accepted, raised
when the loader is built: numbers out of range or of the wrong type, torchrun's variables, the quarantine
path, a world_size the dataset cannot split; and pin_memory without CUDA warns as torch's DataLoader does."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import chute
from chute import delivery

CROP = [chute.CenterCrop(16)]
NATIVE_TYPE_ERROR = "incompatible function arguments"


def make(folder, **kwargs):
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("transforms", CROP)
    return chute.Loader(chute.ImageFolder(folder), **kwargs)


# (argument, value, exception, what the message must say)
LOADER_CASES = [
    ("batch_size", 2**63, ValueError, "batch_size must be an int in [1, 2**63 - 1], got 9223372036854775808"),
    ("batch_size", -5, ValueError, "batch_size must be an int in [1, 2**63 - 1], got -5"),
    ("batch_size", 2.0, TypeError, "batch_size must be an int in [1, 2**63 - 1], got 2.0 (float)"),
    ("batch_size", "4", TypeError, "batch_size must be an int"),
    ("num_threads", 2**40, ValueError, "num_threads must be an int in [1, 2**31 - 1] or 'auto', got 1099511627776"),
    ("num_threads", -1, ValueError, "num_threads must be an int in [1, 2**31 - 1] or 'auto'"),
    ("num_threads", 1.5, TypeError, "num_threads must be an int in [1, 2**31 - 1] or 'auto', got 1.5"),
    ("max_threads", 2**31, ValueError, "max_threads must be an int in [1, 2**31 - 1] or None, got 2147483648"),
    ("prefetch", 2**31, ValueError, "prefetch must be an int in [1, 2**31 - 1] or 'auto', got 2147483648"),
    ("prefetch", -3, ValueError, "prefetch must be an int in [1, 2**31 - 1] or 'auto', got -3"),
    ("max_memory", 2**64, ValueError, "max_memory must be an int in [1, 2**64 - 1], got 18446744073709551616"),
    ("max_memory", -1, ValueError, "max_memory must be an int in [1, 2**64 - 1], got -1"),
    ("max_memory", 1e9, TypeError, "max_memory must be an int in [1, 2**64 - 1], got 1000000000.0 (float)"),
    ("max_pixels", 2**70, ValueError, "max_pixels must be an int in [1, 2**63 - 1]"),
    ("max_pixels", True, TypeError, "max_pixels must be an int in [1, 2**63 - 1], got True (bool)"),
    ("seed", "abc", TypeError, "seed must be an int in [0, 2**64 - 1], got 'abc' (str)"),
    ("seed", -1, ValueError, "seed must be an int in [0, 2**64 - 1], got -1"),
    ("seed", 2**64, ValueError, "seed must be an int in [0, 2**64 - 1]"),
    ("seed", 0.5, TypeError, "seed must be an int in [0, 2**64 - 1], got 0.5 (float)"),
    ("device_prefetch", 2**40, ValueError, "device_prefetch must be an int in [1, 2147483646]"),
    ("max_device_memory", 2**70, ValueError, "max_device_memory must be an int in [1, 2**64 - 1]"),
    ("quarantine", 5, TypeError, "quarantine must be a path (str, bytes or os.PathLike), got 5 (int)"),
    ("decode", "fast", ValueError, "decode must be 'exact' (PIL's pixels) or 'reduced'"),
    ("decode", True, ValueError, "decode must be 'exact' (PIL's pixels) or 'reduced'"),
    ("reducing_gap", 0.5, ValueError, "reducing_gap must be a finite number >= 1.0, as in Pillow; got 0.5"),
    ("reducing_gap", float("nan"), ValueError, "reducing_gap must be a finite number >= 1.0, as in Pillow; got nan"),
    ("reducing_gap", float("inf"), ValueError, "reducing_gap must be a finite number >= 1.0, as in Pillow; got inf"),
    ("reducing_gap", "3", TypeError, "reducing_gap must be a number, got '3' (str)"),
]


@pytest.mark.parametrize("name, value, error, message", LOADER_CASES, ids=[f"{c[0]}={c[1]!r}" for c in LOADER_CASES])
def test_loader_numbers_out_of_range_name_the_argument_and_its_range(folder, name, value, error, message):
    with pytest.raises(error) as e:
        make(folder, **{name: value})
    assert message in str(e.value)
    assert NATIVE_TYPE_ERROR not in str(e.value)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(rank=0, world_size=2**63), ValueError, "world_size must be an int in [1, 2**63 - 1]"),
        (dict(rank="a", world_size=2), TypeError, "rank must be an int in [0, 2**63 - 1], got 'a' (str)"),
        (dict(rank=2, world_size=2), ValueError, "rank must be in [0, world_size), got rank=2 with world_size=2"),
        (dict(rank=0, world_size=1.0), TypeError, "world_size must be an int"),
    ],
)
def test_rank_and_world_size_arguments_name_themselves(folder, kwargs, error, message):
    with pytest.raises(error) as e:
        make(folder, **kwargs)
    assert message in str(e.value)


def test_numpy_integers_are_integers(folder):
    np = pytest.importorskip("numpy")
    loader = make(folder, batch_size=np.int64(6), seed=np.uint64(3), num_threads=np.int32(2))
    assert loader.batch_size == 6 and loader.seed == 3 and len(loader) == 6
    loader.close()


def test_set_epoch_checks_its_argument(folder):
    loader = make(folder)
    with pytest.raises(TypeError, match=r"epoch must be an int in \[0, 2\*\*63 - 1\], got 'x'"):
        loader.set_epoch("x")
    with pytest.raises(ValueError, match=r"epoch must be an int in \[0, 2\*\*63 - 1\], got 18446744073709551616"):
        loader.set_epoch(2**64)
    loader.close()


# (constructor, exception, what the message must say)
TRANSFORM_CASES = [
    (
        lambda: chute.CenterCrop(2**40),
        ValueError,
        "CenterCrop: size must be an int in [1, 2**31 - 1], got 1099511627776",
    ),
    (lambda: chute.CenterCrop((8, -2)), ValueError, "CenterCrop: size must be an int in [1, 2**31 - 1], got -2"),
    (lambda: chute.CenterCrop(1.5), TypeError, "CenterCrop: size must be an int or a sequence of one or two ints"),
    (lambda: chute.CenterCrop("a"), TypeError, "CenterCrop: size must be an int or a sequence of one or two ints"),
    (lambda: chute.Resize(-1), ValueError, "Resize: size must be an int in [1, 2**31 - 1], got -1"),
    (lambda: chute.Resize((2**31, 4)), ValueError, "Resize: size must be an int in [1, 2**31 - 1], got 2147483648"),
    (lambda: chute.RandomResizedCrop(2**32), ValueError, "RandomResizedCrop: size must be an int in [1, 2**31 - 1]"),
    (lambda: chute.RandomResizedCrop(8, scale=(0.1, "a")), TypeError, "RandomResizedCrop: scale[1] must be a number"),
    (lambda: chute.RandomResizedCrop(8, ratio=(0.5,)), ValueError, "RandomResizedCrop: ratio must be a sequence of 2"),
    (lambda: chute.RandomResizedCrop(8, scale=(float("nan"), 1)), ValueError, "scale[0] must be a finite number"),
    (lambda: chute.RandomHorizontalFlip("x"), TypeError, "RandomHorizontalFlip: p must be a number, got 'x'"),
    (
        lambda: chute.RandomHorizontalFlip(2**2000),
        ValueError,
        "RandomHorizontalFlip: p must be a finite number in [0, 1]",
    ),
    (lambda: chute.RandomHorizontalFlip(1.5), ValueError, "RandomHorizontalFlip: p must be a finite number in [0, 1]"),
    (lambda: chute.Normalize((0.5, 0.5, 0.5), (1, 1, "a")), TypeError, "Normalize: std[2] must be a number"),
    (lambda: chute.Normalize((0.5, 0.5), (1, 1, 1)), ValueError, "Normalize: mean must be a sequence of 3 numbers"),
    (lambda: chute.Normalize((0.5, 0.5, 0.5), 1.0), TypeError, "Normalize: std must be a sequence of 3 numbers"),
]


@pytest.mark.parametrize("build, error, message", TRANSFORM_CASES, ids=[c[2][:40] for c in TRANSFORM_CASES])
def test_transform_arguments_name_themselves(build, error, message):
    with pytest.raises(error) as e:
        build()
    assert message in str(e.value)


def test_transforms_take_tensors_and_numpy_numbers():
    norm = chute.Normalize(torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225]))
    assert norm.std == pytest.approx((0.229, 0.224, 0.225))
    assert chute.RandomHorizontalFlip(torch.tensor(0.25)).p == 0.25


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(batch_size=2**62, prefetch=2), ValueError, "lower batch_size"),  # the slot size wrapped
        (dict(transforms=[chute.CenterCrop(2**31 - 1)], prefetch=1, dtype=torch.float32), ValueError, "too large"),
    ],
)
def test_sizes_that_overflow_are_errors_not_small_buffers(folder, kwargs, error, message):
    # Before: a batch of 2**62 samples of 16x16 pixels wrapped to a tiny buffer, and the loader was built.
    with pytest.raises(error, match=message):
        make(folder, **kwargs)


def test_a_prefetch_that_overflows_the_ring_is_an_error_not_an_abort(folder):
    # Before: prefetch + 2 overflowed an int and a native check aborted the process. In a child, so that a
    # regression fails this test rather than killing the test run.
    code = (
        "import chute, sys\n"
        "try:\n"
        "    chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(16)],"
        " prefetch=2**31 - 1)\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ValueError:" in done.stdout and "lower prefetch" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(shard_size=2**70), ValueError, "shard_size must be an int in [0, 2**64 - 1]"),
        (
            dict(shard_size="99999999999999TB"),
            ValueError,
            "shard_size: '99999999999999TB' is more than 2**64 - 1 bytes",
        ),
        (dict(shard_size=1.5), TypeError, "shard_size must be an int"),
        (dict(num_threads=2**40), ValueError, "num_threads must be an int in [1, 2**31 - 1] or None"),
        (dict(num_threads="2"), ValueError, "num_threads must be an int in [1, 2**31 - 1] or None"),
        (dict(part="a", parts=2), TypeError, "part must be an int in [0, 2**31 - 1], got 'a'"),
        (dict(part=0, parts=2**40), ValueError, "parts must be an int in [1, 2**31 - 1]"),
        (dict(progress=5), TypeError, "progress must be callable"),
    ],
)
def test_pack_arguments_name_themselves(folder, tmp_path, kwargs, error, message):
    with pytest.raises(error) as e:
        chute.pack(folder, tmp_path / "out", **kwargs)
    assert message in str(e.value)
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: chute.ImageFolder(5), "root must be a path"),
        (lambda: chute.FileList(None), "path must be a path"),
        (lambda: chute.open(3), "path_or_glob must be a path"),
        (lambda: chute.pack(5, "unused"), "src must be a path"),
        (lambda: chute.packed.merge(5), "dst must be a path"),
        (lambda: chute.packed.index(5), "path_or_glob must be a path"),
    ],
)
def test_source_paths_of_the_wrong_type_name_the_argument(build, message):
    with pytest.raises(TypeError, match=message):
        build()


# --------------------------------------------------------------------------------------- the environment


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "abc", "WORLD_SIZE": "2"}, "the environment variable RANK='abc' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "two"}, "the environment variable WORLD_SIZE='two' is not an integer"),
        (
            {"RANK": "5", "WORLD_SIZE": "2"},
            "rank must be in [0, world_size), got rank=5 with world_size=2 (from the "
            "environment variables RANK and WORLD_SIZE)",
        ),
        (
            {"RANK": "-1", "WORLD_SIZE": "2"},
            "the environment variable RANK='-1' is out of range: it must be an int in [0, 2**63 - 1]",
        ),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "the environment variable WORLD_SIZE='0' is out of range"),
        ({"RANK": "0", "WORLD_SIZE": str(2**64)}, "WORLD_SIZE='18446744073709551616' is out of range"),
    ],
)
def test_torchrun_variables_that_are_not_ints_name_the_variable(folder, monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as e:
        make(folder)
    assert message in str(e.value)


def test_local_rank_is_not_read(folder, monkeypatch):
    # chute shards by RANK and WORLD_SIZE only; a LOCAL_RANK it does not use cannot break it.
    monkeypatch.setenv("LOCAL_RANK", "abc")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loader = make(folder)
    assert (loader.rank, loader.world_size, loader.num_samples) == (0, 1, 36)
    loader.close()


# ------------------------------------------------------------------------------------------ quarantine


@pytest.mark.parametrize(
    "where, error",
    [
        ("missing/dir/bad.jsonl", FileNotFoundError),
        (".", IsADirectoryError),
        ("a_file/bad.jsonl", NotADirectoryError),
    ],
)
def test_an_unwritable_quarantine_path_fails_at_construction(folder, tmp_path, where, error):
    (tmp_path / "a_file").write_text("not a directory")
    path = tmp_path / where
    with pytest.raises(error) as e:
        make(folder, quarantine=path, on_error="skip")
    assert f"cannot append to the quarantine file {str(path.resolve() if where == '.' else path)!r}" in str(e.value)


def test_a_writable_quarantine_file_exists_from_construction(folder, tmp_path):
    path = tmp_path / "bad.jsonl"
    loader = make(folder, quarantine=path, on_error="skip")
    assert path.read_text() == ""  # created, still empty: no sample has failed
    assert sum(len(y) for _, y in loader) == 36
    assert path.read_text() == ""


# ------------------------------------------------------------------------------------------ world_size


def test_world_size_larger_than_the_dataset_is_an_error_with_even_split(folder):
    with pytest.raises(ValueError) as e:
        make(folder, rank=3, world_size=100)
    assert "world_size 100 is larger than the dataset (36 samples)" in str(e.value)
    assert "even_split=False" in str(e.value)
    # Exact evaluation: every sample once, ranks past the end get none (legal, and documented).
    assert make(folder, rank=3, world_size=100, even_split=False).num_samples == 1
    assert make(folder, rank=50, world_size=100, even_split=False).num_samples == 0


def test_drop_last_that_leaves_a_rank_no_batch_warns(folder):
    with pytest.warns(
        UserWarning,
        match=r"this rank visits 4 of the source's 36 samples .* fewer than batch_size=8: "
        r"with drop_last=True every epoch yields no batch",
    ):
        loader = make(folder, batch_size=8, rank=0, world_size=9, drop_last=True)
    assert len(loader) == 0 and list(loader) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(folder, batch_size=4, rank=0, world_size=9, drop_last=True).close()  # one full batch: quiet


# ------------------------------------------------------------------------------------------ pin_memory


def test_pin_memory_without_cuda_warns_like_torch_and_carries_on_unpinned(folder, monkeypatch):
    monkeypatch.setattr(delivery, "cuda_availability", lambda: (False, 0, "no CUDA GPU (test)"))
    with pytest.warns(
        UserWarning,
        match=r"'pin_memory' argument is set as true but no accelerator is found, then "
        r"device pinned memory won't be used \(chute: no CUDA GPU \(test\)\)",
    ):
        loader = make(folder, pin_memory=True)
    assert loader.pin_memory is False
    batches = [(x.clone(), y.clone()) for x, y in loader]
    assert sum(len(y) for _, y in batches) == 36 and not batches[0][0].is_pinned()
    expected = [(x.clone(), y.clone()) for x, y in make(folder, pin_memory=False)]
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(batches, expected, strict=True))


def test_scaled_decode_is_gone_for_decode_reduced(folder):
    """One generation: decode='reduced' (with reducing_gap=1.0 for the old behaviour) replaced it."""
    with pytest.raises(TypeError, match="scaled_decode"):
        make(folder, scaled_decode=True)
    make(folder, decode="reduced", reducing_gap=1.0).close()
