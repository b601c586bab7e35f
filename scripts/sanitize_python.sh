#!/usr/bin/env bash
# The Python smoke run under a sanitizer: builds chute._native with -fsanitize=... in the sanitizer's
# build folder (sharing chute_core with the C++ tests built there), stages the package next to it, and
# runs a subset of the Python tests against it, with the sanitizer runtime preloaded into the
# uninstrumented CPython.
#   scripts/sanitize_python.sh address   # ASan + UBSan, build/asan: test_loader, test_bad_inputs, test_png,
#                                        # test_webp, test_device, test_fastpath_tensor
#   scripts/sanitize_python.sh thread    # TSan, build/tsan: test_loader, test_bad_inputs, test_device,
#                                        # test_fastpath_tensor
# Called by scripts/test.sh after setup (it needs .venv). docs/ROBUSTNESS.md says why these tests.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
export PATH="$here/.venv/bin:$PATH"
mode="$1"
case "$mode" in
  address)
    build=build/asan sanitize=address,undefined runtime=libasan.so
    tests=(python/tests/test_loader.py python/tests/test_bad_inputs.py python/tests/test_png.py python/tests/test_webp.py
           python/tests/test_device.py python/tests/test_fastpath_tensor.py)
    # CPython's own allocations are not freed at exit: leak checking would report them, not chute.
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" ;;
  thread)
    build=build/tsan sanitize=thread runtime=libtsan.so
    tests=(python/tests/test_loader.py python/tests/test_bad_inputs.py python/tests/test_device.py
           python/tests/test_fastpath_tensor.py
           # these fork from a multi-threaded process (DataLoader workers; a child using a plan made before the
           # fork), which TSan's runtime refuses in the child (die_after_fork)
           --deselect python/tests/test_fastpath_tensor.py::test_fast_path_made_before_fork_works_in_the_child
           --deselect python/tests/test_fastpath_tensor.py::test_gather_threads_are_parked_between_epochs)
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ;;
  *) echo "usage: $0 address|thread" >&2; exit 2 ;;
esac

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCHUTE_SANITIZE="$sanitize" -DCHUTE_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE="$here/.venv/bin/python" >/dev/null
cmake --build "$build" --target _native
pkg="$build/pkg"
rm -rf "$pkg" && mkdir -p "$pkg"
cp -r python/chute "$pkg/" && cp "$build"/python/_native*.so "$pkg/chute/"

# The runtime must come first; libstdc++ is preloaded too, or the sanitizer cannot intercept
# __cxa_throw (CPython does not link libstdc++) and aborts on chute's first C++ exception.
export LD_PRELOAD="$(g++ -print-file-name="$runtime") $(g++ -print-file-name=libstdc++.so)"
export PYTHONPATH="$here/$pkg"
# The sanitized module is the one imported, and the runtime is loaded.
python -c "import chute; assert chute._native.__file__.startswith('$here/$pkg'), chute._native.__file__; \
assert '${runtime%.so}' in open('/proc/self/maps').read(), 'no ${runtime%.so} runtime'"
python -m pytest -q -p no:cacheprovider "${tests[@]}"
