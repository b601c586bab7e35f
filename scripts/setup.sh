#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: system libraries, a virtual environment with the Python
# dependencies, and chute itself built into that environment. Each step is skipped when already done.
#   scripts/setup.sh            # everything
#   CHUTE_SKIP_INSTALL=1 ...    # system packages and venv only (no build of chute)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

# --- system packages (Debian) ---------------------------------------------------------------------
# clang and its runtime libraries (libFuzzer, sanitizers) build the fuzz targets (scripts/fuzz.sh);
# chromium + fonts-dejavu-core: the doctor's HTML report is rendered headless in a test.
# libxxhash-dev: the packed format's checksums (XXH3).
apt_pkgs=(g++ make libjpeg62-turbo-dev libpng-dev libgtest-dev libbenchmark-dev clang libclang-rt-14-dev chromium
          fonts-dejavu-core libxxhash-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- virtual environment ---------------------------------------------------------------------------
venv="${CHUTE_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
# torch 2.13.0 is the CPU build this project tests with; matplotlib draws `chute bench --sweep --plot`; the
# rest are build and test tools.
reqs=(torch==2.13.0 numpy pillow rich matplotlib pytest nanobind scikit-build-core cmake ninja)
if ! "$py" - "${reqs[@]}" 2>/dev/null <<'PY'
import sys, importlib.metadata as md
from packaging.requirements import Requirement
for r in map(Requirement, sys.argv[1:]):
    try:
        v = md.version(r.name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if r.specifier and v.split("+")[0] not in r.specifier:
        sys.exit(1)
PY
then
  echo "setup: installing Python packages"
  "$py" -m pip install -q --upgrade pip packaging
  "$py" -m pip install -q "${reqs[@]}"
fi

# --- chute itself ----------------------------------------------------------------------------------
if [ -z "${CHUTE_SKIP_INSTALL:-}" ]; then
  echo "setup: building and installing chute"
  "$py" -m pip install -q --no-build-isolation "$here"
fi
