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


# ---- One description of the engine for every front door (chute/_options.py) -------------------------------
# What each door takes besides the engine's keywords: its own arguments.
_OWN = {
    "chute.Loader": {"self", "source", "transforms", "quarantine", "device", "pin_memory"},
    "chute.ray.RemoteLoader": {
        "self", "source", "transforms", "device", "num_actors", "num_cpus_per_actor", "max_inflight",
        "max_restarts", "actor_options", "timeout_s", "_actor_hook",
    },
}  # fmt: skip
# Struct fields a door sets itself, never from a user's keyword, and why.
_SET_BY_A_DOOR = {
    "extra_buffers": "device delivery: the host batches whose copies are in flight (prepare_delivery)",
    "cpu_affinity": "device='cuda': the CPUs of the GPU's NUMA node",
}
_KEYWORD_OF_FIELD = {"channels_last": "memory_format", "validate_full": "validate"}  # the rest: the same name


def _doors() -> dict:
    """The doors that take engine keywords (chute.DataLoader takes torch's: its folder path is checked
    below). RemoteLoader needs Ray, an optional dependency that the development environment has."""
    import importlib.util

    doors = {"chute.Loader": chute.Loader}
    if importlib.util.find_spec("ray") is not None:
        from chute.ray import RemoteLoader

        doors["chute.ray.RemoteLoader"] = RemoteLoader
    return doors


def _every_field_changed():
    """Options with every field away from its default, and the names of the fields."""
    decode = dict(
        max_pixels=5, max_file_bytes=6, apply_exif_orientation=True, decode="reduced", reducing_gap=2.5,
        validate_full=True, accept_truncated=True,
    )  # fmt: skip
    loader = dict(
        batch_size=7, shuffle=True, seed=2**64 - 1, drop_last=True, num_threads=3, max_threads=5, prefetch=4,
        max_memory=123 << 20, max_ring_bytes=(5 << 30) + 1, extra_buffers=2, rank=1, world_size=3,
        even_split=False, order="shards", shard_window=3, channels_last=True, dtype="bfloat16", on_error="skip",
        cpu_affinity=[0, 1], decode=_native.DecodeOptions(**decode),
    )  # fmt: skip
    delivery = dict(device_prefetch=5, max_device_memory=(3 << 30) + 7)
    return {
        _native.LoaderOptions: loader,
        _native.DecodeOptions: decode,
        _native.DeliveryOptions: delivery,
    }


def test_options_pickle_and_compare_by_every_field():
    import copy
    import pickle

    for cls, values in _every_field_changed().items():
        default = cls()
        assert set(values) == set(default.__getstate__()), f"{cls.__name__}: a field this test does not set"
        o = cls(**values)
        for name in values:
            assert getattr(o, name) != getattr(default, name), f"{cls.__name__}.{name} kept its default"
        for twin in (pickle.loads(pickle.dumps(o)), copy.deepcopy(o), copy.copy(o)):
            assert type(twin) is cls and twin == o and twin is not o
            assert twin.__getstate__() == o.__getstate__()
        assert o != default and not (o == default) and o != "not options"
        for name in values:  # each field alone makes a difference
            assert cls(**{name: values[name]}) != default, name
    # By name: a field the state lacks keeps its default (a state from before the field existed); a name
    # the struct does not know is refused, naming it.
    partial = _native.LoaderOptions.__new__(_native.LoaderOptions)
    partial.__setstate__({"batch_size": 9})
    assert partial == _native.LoaderOptions(batch_size=9)
    unknown = _native.DeliveryOptions.__new__(_native.DeliveryOptions)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        unknown.__setstate__({"bogus": 1})
    # A pinned pool lent to this process does not travel: a copy allocates its ring from the heap.
    assert pickle.loads(pickle.dumps(_native.LoaderOptions())).pinned is False


def test_the_builder_is_the_structs_defaults():
    from chute import _options

    spec = _options.build()  # no keyword: the engine's defaults, exactly (a single process here)
    assert spec.loader == _native.LoaderOptions() and spec.delivery == _native.DeliveryOptions()
    assert spec.dtype is _options.DEFAULTS.dtype is torch.uint8
    fields = {f for f in _native.LoaderOptions().__getstate__() if f != "decode"} | set(
        _native.DecodeOptions().__getstate__()
    )
    fields |= set(_native.DeliveryOptions().__getstate__())
    assert {_KEYWORD_OF_FIELD.get(f, f) for f in fields - set(_SET_BY_A_DOOR)} == set(_options.KEYWORDS), (
        "every field of the options is an engine keyword, or one a door sets itself (_SET_BY_A_DOOR)"
    )
    with pytest.raises(TypeError, match="unexpected engine option 'bogus'"):
        _options.build(bogus=1)


def test_every_door_takes_every_engine_keyword_with_the_engines_default():
    import ast
    import inspect
    import textwrap

    from chute import _options

    for name, door in _doors().items():
        params = inspect.signature(door.__init__).parameters
        assert set(params) == set(_options.KEYWORDS) | _OWN[name], name
        for keyword in _options.KEYWORDS:
            assert params[keyword].default is getattr(_options.DEFAULTS, keyword), (name, keyword)
        # And written as DEFAULTS.<keyword>, never as a literal that happens to equal it today.
        tree = ast.parse(textwrap.dedent(inspect.getsource(door.__init__)))
        args = tree.body[0].args
        defaults = dict(zip([a.arg for a in args.args][-len(args.defaults) :], args.defaults))
        defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults))
        for keyword in _options.KEYWORDS:
            node = defaults[keyword]
            written = ast.unparse(node)
            assert written == f"DEFAULTS.{keyword}", f"{name}: {keyword}={written} restates the engine's default"


class _Built(Exception):
    pass


def test_every_door_hands_every_engine_keyword_to_the_builder(monkeypatch):
    from chute import _options

    seen = {}

    def spy(**keywords):
        seen.update(keywords)
        raise _Built

    monkeypatch.setattr(_options, "build", spy)
    values = {k: object() for k in _options.KEYWORDS}  # distinct: a literal or a mix-up shows
    for name, door in _doors().items():
        seen.clear()
        with pytest.raises(_Built):
            door("never opened", **values)
        assert seen.keys() == values.keys(), name
        assert [k for k in values if seen[k] is not values[k]] == [], name


def test_the_dataloaders_folder_path_builds_through_the_builder(folder, monkeypatch):
    """FolderPlan (chute.DataLoader's ImageFolder path) takes the engine from chute._options too, with the
    defaults of the structs: its ring bound is the engine's max_memory, not a number of its own."""
    from types import SimpleNamespace

    from chute import _options
    from chute.dataloader import folder_path

    calls = []
    real = _options.build

    def spy(**keywords):
        calls.append(keywords)
        return real(**keywords)

    monkeypatch.setattr(_options, "build", spy)
    samples = [(str(p), 0) for p in sorted(Path(folder).rglob("*.jpg"))[:4]]
    dataset = SimpleNamespace(transform=None, target_transform=None, loader=None, samples=samples)
    plan = folder_path.FolderPlan(
        dataset, folder_path.file_list(samples), [chute.CenterCrop(16)], torch.uint8, batch_size=2
    )
    try:
        assert len(calls) == 1 and calls[0]["batch_size"] == 2
        (native,) = plan._loaders.values()
        slot = native.stats()["batch_buffer_bytes"]
        assert native.ring_usage()[1] == _options.DEFAULTS.max_memory // slot  # max_ring_bytes = max_memory
    finally:
        plan.close()
    assert "_RING_BYTES" not in vars(folder_path)


def test_the_prefetch_notice_is_the_engines(folder, tmp_path):
    """The engine, which lowers an explicit prefetch to fit max_memory, says so in its own words; the
    doors print that (chute.Loader as it is, the DataLoader's folder path after what prefetch_factor
    means there) and compute nothing of it themselves."""
    import warnings
    from types import SimpleNamespace

    from chute.dataloader import folder_path

    max_memory = 10 * 2 * (16 * 16 * 3 + 8)  # ten buffers of batch 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = chute.Loader(str(folder), 2, transforms=[chute.CenterCrop(16)], prefetch=50, max_memory=max_memory)
    notices = loader._native.notices
    assert len(notices) == 1 and "prefetch=50 needs" in notices[0] and "using prefetch=8" in notices[0]
    assert [str(w.message) for w in caught if "prefetch" in str(w.message)] == notices
    assert loader.prefetch == 8
    loader.close()
    samples = [(str(p), 0) for p in sorted(Path(folder).rglob("*.jpg"))[:4]]
    dataset = SimpleNamespace(transform=None, target_transform=None, loader=None, samples=samples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = folder_path.FolderPlan(
            dataset, folder_path.file_list(samples), [chute.CenterCrop(16)], torch.uint8, 2, prefetch=10**6
        )
    said = [str(w.message) for w in caught if "prefetch" in str(w.message)]
    (native,) = plan._loaders.values()
    assert len(said) == 1 and said[0].endswith(native.notices[0]) and "prefetch_factor" in said[0], said
    plan.close()
    for door in ("loader.py", "dataloader/folder_path.py", "ray/loader.py", "ray/actor.py"):
        text = (PACKAGE / door).read_text()  # reading the buffer size back to restate (prefetch + 2) * buffer
        assert '["batch_buffer_bytes"]' not in text and "+ 2) *" not in text, f"{door} recomputes the engine's rule"


def test_only_the_builder_makes_options_and_doors_import_no_private_names():
    """The options structs are constructed in chute/_options.py alone (ray/device.py remakes the
    DeliveryOptions its caller's options gave it, field by field); the doors import no private name of
    another module (the kwargs dict and `from chute.loader import _DECODE` of old)."""
    makers = {"LoaderOptions", "DecodeOptions", "DeliveryOptions"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in makers
                and _is_native(node.func.value)
                and rel not in ("_options.py", "ray/device.py")
            ):
                offenders.append(f"{rel}:{node.lineno} makes _native.{node.func.attr}")
            if rel in ("loader.py", "dataloader/folder_path.py") or rel.startswith("ray/"):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chute."):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    if private:
                        offenders.append(f"{rel}:{node.lineno} imports {private} from {node.module}")
    assert not offenders, "\n".join(offenders)


def test_accept_truncated_is_a_keyword_like_any_other_field(tmp_path):
    """DecodeOptions.accept_truncated, once set only by the DataLoader's folder path (from PIL's flag), is
    a keyword of every door now: a JPEG whose data ends early decodes, the rest gray, as PIL does under
    ImageFile.LOAD_TRUNCATED_IMAGES; without it, the file is a SampleError."""
    import numpy as np
    from PIL import Image

    (tmp_path / "a").mkdir()
    noise = np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)  # scan data dominates
    Image.fromarray(noise).save(tmp_path / "a" / "cut.jpg", quality=95)
    whole = (tmp_path / "a" / "cut.jpg").read_bytes()
    (tmp_path / "a" / "cut.jpg").write_bytes(whole[: len(whole) // 2])
    kw = dict(batch_size=1, transforms=[chute.CenterCrop(128)], num_threads=1)
    with chute.Loader(str(tmp_path), accept_truncated=True, **kw) as loader:
        ((images, _),) = list(loader)
        assert (images[0, :, -1, :] == 128).all() and images[0, :, 0, :].float().std() > 30  # decoded, then gray
    with chute.Loader(str(tmp_path), **kw) as loader, pytest.raises(chute.SampleError, match="cut.jpg"):
        list(loader)
