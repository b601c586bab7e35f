#!/usr/bin/env bash
# Sets up (scripts/setup.sh, idempotent) and runs every test: the C++ unit tests through ctest, then the
# Python tests through pytest against the installed package.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
export PATH="$here/.venv/bin:$PATH"

echo "== C++ tests (ctest)"
# The microbenchmarks are built too (not run), so that they keep compiling.
cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUTE_BUILD_TESTS=ON -DCHUTE_BUILD_BENCHMARKS=ON >/dev/null
cmake --build build/cpp
ctest --test-dir build/cpp --output-on-failure

echo "== Python tests (pytest)"
python -m pytest python/tests -q
