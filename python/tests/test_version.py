"""`chute --version` and `chute.__version__` say the same thing, and it is the version pip installed."""

from __future__ import annotations

import importlib.metadata
import re

import pytest

import chute
from chute.cli import build_parser


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-].*)?", chute.__version__)


def test_cli_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"chute {chute.__version__}\n"


def test_installed_metadata_matches_when_installed():
    # Under scripts/test.sh the package is pip-installed, and its metadata's version is read from
    # chute/__init__.py by the build (pyproject.toml: dynamic version). A developer running from a
    # source tree on PYTHONPATH may have no or an older install: then there is nothing to compare.
    if "site-packages" not in chute.__file__:
        pytest.skip("chute imported from a source tree, not an installed package")
    assert importlib.metadata.version("chute") == chute.__version__
