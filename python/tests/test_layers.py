"""The C++ core's floor plan: folders follow the data path, and no stage includes a later one.

cpp/src/<stage>/ and cpp/include/chute/<stage>/ hold one stage each (docs/ARCHITECTURE.md, "Stage to
file"). A stage may include only the stages listed for it below: decode never sees the HTTP engine, the
object-storage stack (its own library, chute_remote) sees only the base layer, and the engine never the
writer. Tests (``*_test.cc``) may reach further: they drive a stage through the ones above it.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "cpp"

ALLOWED = {
    "base": set(),
    "remote": {"base"},
    "order": {"base"},
    "io": {"base", "order", "remote"},
    "formats": {"base", "io"},
    "decode": {"base"},
    "transform": {"base", "decode"},
    "engine": {"base", "order", "io", "decode", "transform"},
    "gpu": {"base", "engine", "transform", "decode", "io", "order"},
    "pack": {"base", "io", "decode", "transform"},
}
INCLUDE = re.compile(r'^#include "(?:chute/)?([a-z]+)/', re.M)


def _stage_files():
    for top in (ROOT / "src", ROOT / "include" / "chute"):
        for stage_dir in sorted(p for p in top.iterdir() if p.is_dir()):
            for f in sorted(stage_dir.rglob("*")):
                if f.suffix in (".cc", ".h", ".c"):
                    yield stage_dir.name, f


def test_every_stage_folder_is_known():
    assert {s for s, _ in _stage_files()} == set(ALLOWED)
    assert {p.name for p in (ROOT / "include" / "chute").iterdir()} <= set(ALLOWED)


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_no_stage_includes_a_later_one(stage):
    bad = []
    for s, f in _stage_files():
        if s != stage or f.name.endswith("_test.cc"):
            continue
        for used in INCLUDE.findall(f.read_text()):
            if used != stage and used not in ALLOWED[stage]:
                bad.append(f"{f.relative_to(ROOT)} includes {used}/")
    assert not bad, "\n".join(bad)


def test_no_folder_is_a_flat_room():
    """About 15 implementation files a folder at most (tests beside them are not counted)."""
    for d in (ROOT / "src").iterdir():
        if d.is_dir():
            impl = [f for f in d.glob("*.cc") if not f.name.endswith("_test.cc")]
            assert len(impl) <= 16, f"{d.name}: {len(impl)} implementation files"
