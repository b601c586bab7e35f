"""The seams between Python and the engine: options cross once, by name, with their defaults and checks in
C++ (chute._native.LoaderOptions/DecodeOptions/DeliveryOptions); a bad sample crosses once, as the one
chute.SampleError; one available_cores(), honouring affinity and the cgroup CPU quota."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest
import torch

import chute
from chute import _native

PACKAGE = Path(chute.__file__).parent


def _is_native(node: ast.expr) -> bool:
    """``_native`` or ``chute._native``: the extension module itself (not a source's ``._native``)."""
    if isinstance(node, ast.Name):
        return node.id == "_native"
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "_native"
        and isinstance(node.value, ast.Name)
        and node.value.id == "chute"
    )


def test_no_native_call_takes_more_than_four_positional_arguments():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_native(node.func.value)
            ):
                continue
            # A starred argument spreads an unknown number: it counts as more than any limit.
            positional = sum(5 if isinstance(a, ast.Starred) else 1 for a in node.args)
            if positional > 4:
                offenders.append(
                    f"{path.relative_to(PACKAGE)}:{node.lineno} _native.{node.func.attr} ({positional} positional)"
                )
    assert not offenders, "native calls with more than 4 positional arguments:\n" + "\n".join(offenders)


def test_the_ast_check_sees_a_long_positional_call(tmp_path):
    # The check above must be able to fail: the old call shape is caught.
    tree = ast.parse("_native.Loader(s, t, 4, False, 0, False, 0)")
    call = tree.body[0].value
    assert _is_native(call.func.value) and len(call.args) == 7


def test_options_take_keywords_and_keep_the_cxx_defaults():
    o = _native.LoaderOptions()
    assert (o.batch_size, o.num_threads, o.max_threads, o.prefetch) == (1, 0, 0, 0)  # 0: auto / None
    assert (o.max_memory, o.max_ring_bytes, o.on_error, o.dtype) == (2 << 30, 4 << 30, "raise", "uint8")
    assert _native.DecodeOptions().max_pixels == 200_000_000
    assert _native.DeliveryOptions().device_prefetch == 2
    o = _native.LoaderOptions(
        batch_size=8,
        num_threads="auto",
        max_threads=None,
        prefetch=3,
        on_error="skip",
        dtype="float16",
        channels_last=True,
        rank=1,
        world_size=2,
        decode=_native.DecodeOptions(max_pixels=5, decode="reduced", reducing_gap=1.5),
    )
    assert (o.batch_size, o.num_threads, o.max_threads, o.prefetch) == (8, 0, 0, 3)
    assert (o.on_error, o.dtype, o.channels_last, o.rank, o.world_size) == ("skip", "float16", True, 1, 2)
    assert (o.decode.max_pixels, o.decode.decode, o.decode.reducing_gap) == (5, "reduced", 1.5)
    o.decode.max_pixels = 7  # the nested struct itself, not a copy
    assert o.decode.max_pixels == 7
    assert "batch_size=8" in repr(o)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(batch_size=0), ValueError, "batch_size must be an int in [1, 2**63 - 1], got 0"),
        (dict(batch_size=2**63), ValueError, "batch_size must be an int in [1, 2**63 - 1], got 9223372036854775808"),
        (dict(batch_size="4"), TypeError, "batch_size must be an int in [1, 2**63 - 1], got '4' (str)"),
        (dict(num_threads="many"), ValueError, "num_threads must be an int in [1, 2**31 - 1] or 'auto', got 'many'"),
        (dict(max_threads="auto"), ValueError, "max_threads must be an int in [1, 2**31 - 1] or None, got 'auto'"),
        (dict(on_error="ignore"), ValueError, "on_error must be 'raise' or 'skip', got 'ignore'"),
        (dict(dtype="int8"), ValueError, "dtype must be one of uint8, float32, float16, bfloat16, got 'int8'"),
        (dict(bogus=1), TypeError, "LoaderOptions() got an unexpected keyword argument 'bogus'"),
    ],
)
def test_options_name_the_bad_value(kwargs, error, message):
    with pytest.raises(error) as e:
        _native.LoaderOptions(**kwargs)
    assert message in str(e.value)


def test_cross_option_checks_live_in_validate():
    o = _native.LoaderOptions(num_threads=4, max_threads=2)
    with pytest.raises(ValueError, match="num_threads=4 exceeds max_threads=2"):
        o.validate()
    with pytest.raises(ValueError, match="device_prefetch must be an int in \\[1, 2147483646\\], got 0"):
        _native.DeliveryOptions(device_prefetch=0)


def test_on_error_is_checked_by_the_engine(folder):
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
        chute.Loader(chute.ImageFolder(folder), 2, on_error="ignore")


def test_available_cores_is_the_affinity_within_the_cgroup_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    assert 1 <= _native.available_cores() <= affinity
    (tmp_path / "fs" / "job").mkdir(parents=True)
    (tmp_path / "self").write_text("0::/job\n")
    (tmp_path / "fs" / "job" / "cpu.max").write_text("100000 100000\n")  # one CPU of quota
    assert _native.available_cores(cgroup_root=str(tmp_path / "fs"), self_cgroup=str(tmp_path / "self")) == 1
    (tmp_path / "fs" / "job" / "cpu.max").write_text("max 100000\n")
    assert _native.available_cores(cgroup_root=str(tmp_path / "fs"), self_cgroup=str(tmp_path / "self")) == affinity


def test_python_asks_the_engine_for_cores():
    from chute.bench import run
    from chute.doctor import cpu

    assert run.available_cores() == cpu.available_cores() == _native.available_cores()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ("len(os.sched_getaffinity" in line or "os.cpu_count(" in line) and "doctor/cpu.py" not in str(path):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert not offenders, "core counts computed outside chute._native.available_cores():\n" + "\n".join(offenders)


def test_one_class_named_sample_error():
    assert not hasattr(_native, "SampleError")
    found = {
        id(m.SampleError)
        for name, m in list(sys.modules.items())
        if name.startswith("chute") and m is not None and hasattr(m, "SampleError")
    }
    assert found == {id(chute.SampleError)}


def _corrupt_folder(root: Path) -> Path:
    from PIL import Image

    (root / "a").mkdir(parents=True)
    Image.new("RGB", (32, 32), (10, 20, 30)).save(root / "a" / "0_good.jpg")
    (root / "a" / "1_bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return root


def test_a_corrupt_file_is_a_sample_error_naming_index_path_and_reason(tmp_path):
    loader = chute.Loader(
        chute.ImageFolder(_corrupt_folder(tmp_path / "d")), 1, transforms=[chute.CenterCrop(16)], num_threads=1
    )
    it = iter(loader)
    next(it)
    with pytest.raises(chute.SampleError) as e:
        next(it)
    assert type(e.value) is chute.SampleError
    assert e.value.index == 1 and e.value.path.endswith("1_bad.jpg") and e.value.reason
    assert e.value.epoch == 0
    assert str(e.value) == f"sample 1 ({e.value.path}): {e.value.reason}"
    loader.close()


def test_a_bad_argument_is_a_value_error_not_a_sample_error(folder):
    with pytest.raises(ValueError) as e:
        chute.Loader(chute.ImageFolder(folder), 2, num_threads=4, max_threads=2)
    assert not isinstance(e.value, chute.SampleError)
    with pytest.raises(ValueError) as e:  # an engine Status (kInvalidArgument) from start_epoch
        loader = chute.Loader(chute.ImageFolder(folder), 2, transforms=[chute.CenterCrop(8)], num_threads=1)
        try:
            loader._native.start_epoch(0, 0, torch.tensor([10**9]).numpy())
        finally:
            loader.close()
    assert not isinstance(e.value, chute.SampleError)


def test_loader_defaults_are_the_engines():
    import inspect

    params = inspect.signature(chute.Loader).parameters
    loader, decode, delivery = _native.LoaderOptions(), _native.DecodeOptions(), _native.DeliveryOptions()
    for name in (
        "batch_size",
        "shuffle",
        "seed",
        "drop_last",
        "max_memory",
        "on_error",
        "even_split",
        "max_ring_bytes",
    ):
        assert params[name].default == getattr(loader, name), name
    for name in ("max_pixels", "apply_exif_orientation", "decode", "reducing_gap", "max_file_bytes"):
        assert params[name].default == getattr(decode, name), name
    for name in ("device_prefetch", "max_device_memory"):
        assert params[name].default == getattr(delivery, name), name
    assert (params["max_memory"].default, params["max_ring_bytes"].default) == (2 << 30, 4 << 30)
