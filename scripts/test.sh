#!/usr/bin/env bash
# Sets up (scripts/setup.sh, idempotent) and runs every test: the style checks (clang-format, ruff), the C++ unit tests through ctest, then the
# Python tests through pytest against the installed package (the slow soak test included), then the C++
# tests and a Python smoke run under ASan+UBSan and under TSan, then each fuzz target for 30 s.
# It also builds the manylinux wheel and checks it in a new venv (scripts/wheel.sh --check).
# It runs the real-torchvision tier in .venv-tv (scripts/test_torchvision.sh).
# CHUTE_SKIP_WHEEL=1, CHUTE_SKIP_TORCHVISION=1, CHUTE_SKIP_SANITIZERS=1 and CHUTE_SKIP_FUZZ=1 skip those parts locally. docs/ROBUSTNESS.md explains
# what runs under which sanitizer.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh --dev
export PATH="$here/.venv/bin:$PATH"

echo "== Style: clang-format (.clang-format) and ruff (pyproject.toml [tool.ruff])"
git ls-files -z 'cpp/*.cc' 'cpp/*.h' 'cpp/*.c' 'python/src/*.cc' 'python/src/*.h' 'bench/*.c' | xargs -0 clang-format --dry-run -Werror
ruff check .
ruff format --check .

echo "== C++ tests (ctest)"
# The microbenchmarks are built too (not run), so that they keep compiling.
cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUTE_BUILD_TESTS=ON -DCHUTE_BUILD_BENCHMARKS=ON >/dev/null
cmake --build build/cpp
ctest --test-dir build/cpp --output-on-failure

echo "== Python tests (pytest)"
python -m pytest python/tests -q

if [ -z "${CHUTE_SKIP_TORCHVISION:-}" ]; then
  echo "== Real torchvision tier: torch 2.14.1, torchvision 0.29.1, Pillow 13 and 11.3 (scripts/test_torchvision.sh)"
  bash scripts/test_torchvision.sh
fi

if [ -z "${CHUTE_SKIP_WHEEL:-}" ]; then
  echo "== Wheel: build, auditwheel repair, install into a new venv, check (scripts/wheel.sh --check)"
  bash scripts/wheel.sh --check
fi

if [ -z "${CHUTE_SKIP_SANITIZERS:-}" ]; then
  echo "== C++ tests under ASan + UBSan"
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCHUTE_SANITIZE=address,undefined >/dev/null
  cmake --build build/asan --target chute_tests
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --test-dir build/asan --output-on-failure
  echo "== Python smoke under ASan + UBSan"
  bash scripts/sanitize_python.sh address

  echo "== C++ tests under TSan"
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCHUTE_SANITIZE=thread >/dev/null
  cmake --build build/tsan --target chute_tests
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --test-dir build/tsan --output-on-failure
  echo "== Python smoke under TSan"
  bash scripts/sanitize_python.sh thread
fi

if [ -z "${CHUTE_SKIP_FUZZ:-}" ]; then
  echo "== Fuzz targets, 30 s each (regression check)"
  bash scripts/fuzz.sh 30
fi
