"""The corrupt-data corpus of issue #6, generated here from Pillow images, and the harness that runs a loader
over it under each error policy. test_bad_inputs.py asserts on the outcomes; bench/robustness_table.py
prints them as a table.

Each case is a small ImageFolder of good JPEGs with bad files planted at known indices. Every file has a
class of its own (000/img.jpg, 001/img.jpg, ...), so a sample's label is its index and the labels of a
batch say exactly which samples it holds. One case needs a process of its own: an unreadable file
(root reads a mode-000 file anyway, through its CAP_DAC_OVERRIDE capability, so as root that case runs
under ``setpriv`` with that capability and CAP_DAC_READ_SEARCH dropped).

An I/O error (EIO) is no bad sample but the machine failing: it is retried, then raised as
chute.ResourceError under either policy (test_resources.py, with the LD_PRELOAD shim faulty_read.c and
faulty_read_library() below), so it is not in this corpus.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
GOOD = 10  # good images around the bad ones
BATCH = 4
BAD_AT = 5  # where a single bad file goes: batch 1, so one full batch comes before it


def _encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def good_image(i: int, size=(72, 56)) -> Image.Image:
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    base = np.stack([(x * (3 + c) + y * (5 - c) + 40 * c) % 256 for c in range(3)], axis=-1)
    noisy = base + rng.normal(0, 8, base.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def good_jpeg(i: int) -> bytes:
    return _encode(good_image(i), "JPEG", quality=90)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def jpeg_bomb() -> bytes:
    """A valid small JPEG whose SOF header claims 65500 x 65500 (4.3 gigapixels)."""
    data = bytearray(good_jpeg(0))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, 65500, 65500)  # height, width
    return bytes(data)


def png_bomb() -> bytes:
    """A PNG whose IHDR (CRC fixed up) claims 65500 x 65500 RGB, with a tiny IDAT."""
    ihdr = struct.pack(">IIBBBBB", 65500, 65500, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + _png_chunk(b"IEND", b"")
    )


def corrupt_entropy() -> bytes:
    """Headers intact; the middle of the entropy-coded scan overwritten with 0xFF 0x00 pairs (a stuffed
    0xFF: long runs of 1 bits, which no Huffman table of libjpeg's encoder assigns)."""
    data = bytearray(good_jpeg(1))
    sos = data.find(b"\xff\xda")
    scan = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")
    mid = (scan + len(data)) // 2
    data[mid : mid + 64] = b"\xff\x00" * 32
    return bytes(data)


def truncation_offsets(n: int) -> list[int]:
    """Cut points across the file: inside SOI, the APP0/DQT/SOF/DHT headers, the scan, and the EOI marker."""
    return sorted({1, 2, 3, 4, 11, 30, 80, 150, 300, 400, n // 4, n // 2, 3 * n // 4, n - 64, n - 3, n - 2, n - 1})


@dataclasses.dataclass
class Case:
    name: str  # the row of the table
    plant: Callable[[Path, list[Path]], list[int]]  # makes the bad files; returns their indices
    reason: str  # a substring of every bad sample's reason ("": reasons vary)
    process: str = "in"  # "in": this process; "nodac": a child without root's file-permission override
    after_index: Callable[[Path, list[Path]], None] | None = None  # runs after ImageFolder() has listed the files
    decodes: bool = False  # a valid image in a surprising form: it must decode, under both policies


def sample_path(root: Path, index: int) -> Path:
    return root / f"{index:03d}" / "img.jpg"


def _one(data_fn: Callable[[], bytes], at: int = BAD_AT):
    def plant(root: Path, files: list[Path]) -> list[int]:
        files[at].write_bytes(data_fn())
        return [at]

    return plant


def _plant_truncations(root: Path, files: list[Path]) -> list[int]:
    """One truncated file per offset, interleaved with the good ones: indices 1, 3, 5, ..."""
    good = good_jpeg(2)
    bad = []
    for k, off in enumerate(truncation_offsets(len(good))):
        index = GOOD + 2 * k + 1
        for i, data in ((index - 1, good_jpeg(200 + k)), (index, good[:off])):
            sample_path(root, i).parent.mkdir(exist_ok=True)
            sample_path(root, i).write_bytes(data)
        bad.append(index)
    return bad


def _plant_unreadable(root: Path, files: list[Path]) -> list[int]:
    files[BAD_AT].chmod(0)
    return [BAD_AT]


def _delete_after_index(root: Path, files: list[Path]) -> None:
    files[BAD_AT].unlink()


def _plant_fifo(root: Path, files: list[Path]) -> list[int]:
    files[BAD_AT].unlink()
    os.mkfifo(files[BAD_AT])
    return [BAD_AT]


CASES = [
    Case("truncated JPEG, cut at 17 offsets (SOI, headers, scan, EOI)", _plant_truncations, ""),
    Case("zero-byte file", _one(lambda: b""), "empty file"),
    Case("random bytes", _one(lambda: np.random.default_rng(7).bytes(3000)), "not a JPEG, PNG or WebP"),
    Case(
        "random bytes after a JPEG SOI marker",
        _one(lambda: b"\xff\xd8\xff" + np.random.default_rng(8).bytes(3000)),
        "CorruptData",
    ),
    Case("PNG named .jpg", _one(lambda: _encode(good_image(3), "PNG")), "", decodes=True),
    Case("GIF named .jpg", _one(lambda: _encode(good_image(4), "GIF")), "GIF images are not supported"),
    Case("valid header, corrupt entropy stream", _one(corrupt_entropy), "Corrupt JPEG data"),
    Case("JPEG header claiming 65500x65500 (bomb)", _one(jpeg_bomb), "over the limit of 200000000 (max_pixels"),
    Case("PNG header claiming 65500x65500 (bomb)", _one(png_bomb), "over the limit of 200000000 (max_pixels"),
    Case("CMYK JPEG (Adobe, inverted)", _one(lambda: _encode(good_image(5).convert("CMYK"), "JPEG")), "", decodes=True),
    Case("unreadable file (mode 000)", _plant_unreadable, "Permission denied", process="nodac"),
    Case(
        "file deleted after indexing",
        lambda root, files: [BAD_AT],
        "No such file or directory",
        after_index=_delete_after_index,
    ),
    Case("FIFO named .jpg", _plant_fifo, "not a regular file"),
]


def build(case: Case, root: Path) -> list[int]:
    """Writes the case's folder under root; returns the bad indices."""
    files = []
    for i in range(GOOD):
        path = sample_path(root, i)
        path.parent.mkdir(parents=True)
        path.write_bytes(good_jpeg(100 + i))
        files.append(path)
    return case.plant(root, files)


@dataclasses.dataclass
class Outcome:
    policy: str
    num_samples: int  # in the source
    sizes: list[int]  # batch sizes of the first epoch (raise: of every resumed run)
    labels: list[int]  # the samples delivered in the first epoch, in order
    before_first_error: int  # samples delivered before the first SampleError
    raised: list[tuple[int, str, str]]  # (index, path, reason) of each SampleError, in order
    errors: list[tuple[int, str, str]]  # loader.errors() after the epoch (skip)
    quarantined: list[dict]  # lines of the quarantine file
    second_epoch_same: bool  # the next epoch gives the same batches and errors
    expected_paths: dict[int, str]  # bad index -> its path in the source

    def summary(self) -> str:
        if self.policy == "raise":
            if not self.raised:
                return f"decoded; batches {self.sizes}"
            first = self.raised[0]
            resumed = f"; resumed past each: {len(self.raised)} raised" if len(self.raised) > 1 else ""
            return (
                f"SampleError(index {first[0]}, reason '{_short(first[2])}') after {self.before_first_error} samples"
                f"{resumed}; next epoch {'identical' if self.second_epoch_same else 'DIFFERS'}"
            )
        if not self.errors:
            return f"decoded; batches {self.sizes}"
        return (
            f"skipped {len(self.errors)}; batches {self.sizes}; errors() and quarantine name "
            f"{'each' if len(self.quarantined) == len(self.errors) else 'NOT each'}"
        )


def _short(reason: str, n: int = 100) -> str:
    return reason if len(reason) <= n else reason[: n - 3] + "..."


def run_policy(root: Path, policy: str, bad: list[int], after_index=None) -> Outcome:
    """Two epochs over the folder with this policy. With 'raise', each SampleError is caught and the epoch
    resumed just past it (load_state_dict), so every bad sample is reported; the second epoch must
    repeat the first exactly."""
    import torch

    import chute

    source = chute.ImageFolder(root)
    if after_index is not None:
        after_index(root, [Path(p) for p, _ in source.samples])
    quarantine = Path(tempfile.mkdtemp()) / "bad.jsonl"
    loader = chute.Loader(
        source,
        batch_size=BATCH,
        on_error=policy,
        quarantine=quarantine,
        num_threads=2,
        transforms=[chute.RandomResizedCrop(32), chute.RandomHorizontalFlip()],
        seed=3,
    )

    def epoch(e: int):
        sizes, labels, raised, before = [], [], [], None
        loader.set_epoch(e)
        while True:
            try:
                for x, y in loader:
                    sizes.append(x.shape[0])
                    labels.append(y.clone())
                    assert torch.isfinite(x.float()).all()
                break
            except chute.SampleError as err:
                if before is None:
                    before = sum(sizes)
                raised.append((err.index, err.path, err.reason))
                if policy != "raise" or err.index + 1 > len(source):
                    raise
                state = loader.state_dict()
                state.update(epoch=e, position=err.index + 1)  # sequential order: position == index
                loader.load_state_dict(state)
        got = torch.cat(labels).tolist() if labels else []
        return sizes, got, raised, sum(sizes) if before is None else before

    sizes, labels, raised, before = epoch(0)
    errors = [(e.index, e.path, e.reason) for e in loader.errors()]
    second = epoch(1)
    loader.close()
    quarantined = [json.loads(line) for line in quarantine.read_text().splitlines()] if quarantine.exists() else []
    shutil.rmtree(quarantine.parent)
    paths = {i: p for i, (p, _) in enumerate(source.samples)}
    return Outcome(
        policy,
        len(source),
        sizes,
        labels,
        before,
        raised,
        errors,
        quarantined,
        (sizes, labels, raised, before) == second,
        {i: paths[i] for i in bad},
    )


def _run_elsewhere(case: Case, runs: list[tuple[Path, str, list[int]]]) -> list[Outcome]:
    """Runs run_policy for each (root, policy, bad) in one child process: without root's permission
    override."""
    env = dict(os.environ)
    prefix = []
    if case.process == "nodac" and os.geteuid() == 0:
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    code = (
        "import dataclasses, json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "import bad_inputs as b; "
        "print(json.dumps([dataclasses.asdict(b.run_policy(Path(r), p, bad)) for r, p, bad in json.loads(sys.argv[2])]))"
    )
    arg = json.dumps([(str(root), policy, bad) for root, policy, bad in runs])
    out = subprocess.run(
        prefix + [sys.executable, "-c", code, str(HERE), arg], capture_output=True, text=True, env=env, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(f"{case.name}: child failed:\n{out.stderr}")
    outcomes = []
    for d in json.loads(out.stdout.strip().splitlines()[-1]):
        d["raised"] = [tuple(r) for r in d["raised"]]
        d["errors"] = [tuple(r) for r in d["errors"]]
        d["expected_paths"] = {int(k): v for k, v in d["expected_paths"].items()}
        outcomes.append(Outcome(**d))
    return outcomes


_shim: Path | None = None


def faulty_read_library() -> Path:
    """Compiles faulty_read.c once per process (cc from scripts/setup.sh's g++)."""
    global _shim
    if _shim is None:
        out = Path(tempfile.mkdtemp()) / "libfaulty_read.so"
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "faulty_read.c"), "-ldl"], check=True
        )
        _shim = out
    return _shim


def run_case(case: Case) -> dict[str, Outcome]:
    """The case under both policies: {'raise': Outcome, 'skip': Outcome}."""
    top = Path(tempfile.mkdtemp(prefix="chute-bad-"))
    try:
        runs = [(top / policy, policy, build(case, top / policy)) for policy in ("raise", "skip")]
        if case.process == "in":
            outcomes = [run_policy(root, policy, bad, case.after_index) for root, policy, bad in runs]
        else:
            outcomes = _run_elsewhere(case, runs)
        return {o.policy: o for o in outcomes}
    finally:
        for p in top.rglob("*"):
            if p.is_file() and not p.is_symlink():
                p.chmod(0o644)
        shutil.rmtree(top)
