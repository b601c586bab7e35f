"""The wheel ships the library and its tools, not the lab: test servers (the fault proxy, the S3 emulator)
live in the test tree (python/tests/support/), never under the package.

scikit-build-core puts into the wheel the directories pyproject.toml's ``wheel.packages`` names, whole, so
the package directory's files are the wheel's Python files (scripts/wheel.sh builds it; listing it:
``python -m zipfile -l dist/chute-*.whl``). These checks read the source tree; nothing is built."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent
TEST_SERVERS = ("FaultProxy", "MotoServer")  # python/tests/support/


def packaged_files() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = config["tool"]["scikit-build"]["wheel"]["packages"]
    return sorted(f for p in packages for f in (ROOT / p).rglob("*") if f.is_file())


def test_the_wheel_packs_only_the_chute_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["scikit-build"]["wheel"]["packages"] == ["python/chute"]


def test_no_test_server_is_in_the_package():
    files = [f.relative_to(ROOT / "python").as_posix() for f in packaged_files()]
    assert files and not [f for f in files if f.startswith("chute/testing/")]
    defined = {
        f"{f.relative_to(ROOT)}: {node.name}"
        for f in packaged_files()
        if f.suffix == ".py"
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.ClassDef) and node.name in TEST_SERVERS
    }
    assert not defined, f"test servers in the wheel: {sorted(defined)}"


def test_the_package_never_imports_the_test_tree():
    """The tests import the package, never the other way round: a wheel has no python/tests."""
    support = {p.stem for p in (TESTS / "support").glob("*.py")} | {"support", "conftest"}
    found = []
    for f in packaged_files():
        if f.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            found += [f"{f.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in support]
    assert not found, found


def test_the_test_servers_are_where_the_tests_find_them():
    from support.fault_proxy import FaultProxy
    from support.s3_server import MotoServer

    assert FaultProxy.__module__ == "support.fault_proxy" and MotoServer.__module__ == "support.s3_server"
