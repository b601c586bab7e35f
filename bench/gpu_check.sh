#!/usr/bin/env bash
# The GPU check, in one command of under 5 minutes, on the machine this project can be lent (docs/GPU.md):
# no network, Python 3.12 with a CUDA torch, torchvision, nanobind, scikit-build-core, cmake, ninja, pytest,
# nvcc, and no libjpeg / libpng / zlib / xxhash headers. What it needs beyond that travels with the working
# tree: build/gpu-debs, made here by scripts/fetch_gpu_debs.sh.
#
#   0. unpacks the .deb files (dpkg-deb -x, or a Python ar+tar reader) into build/gpu-prefix, and builds chute
#      against that prefix only (its libjpeg, libpng and zlib, found at run time through the build tree's run
#      path; xxhash headers; googletest from sources) with the machine's own torch, nanobind and compiler;
#   1. one libcudart in /proc/self/maps, and the C++ CUDA tests run, not skipped (among them chute.ray's path:
#      shared memory registered with cudaHostRegister as the source of the async copy);
#   2. section 1's scenario on the GPU: pinned CPU batches dropped right after a non_blocking copy queued behind
#      torch.cuda._sleep, on the current and on a side stream, prefetch 1 and 2, against clones;
#   3. device='cuda' batches against a CPU loader with the same seed, on a non-default stream, in bf16;
#   4. H2D bandwidth: chute's ring against cudaMemcpy from pinned (target >= 0.9) and pageable memory;
#   5. ResNet-50 (channels_last, AMP) on generated JPEGs: img/s and GPU-busy fraction for chute device='cuda',
#      chute CPU + pin_memory, and torch's DataLoader at its best num_workers, >= 20 warm-up steps each, and
#      the loader threads each needs to keep the GPU >= 95% busy (bench/gpu_train.py).
# A skipped CUDA test counts as a failure. Everything lands in $OUT (default build/gpu-out): gpu_check.log,
# results.txt (one PASS/FAIL line per check, then the figures), gtest.xml, pytest.xml, h2d.txt, train.json.
#
#   bash bench/gpu_check.sh              # on the GPU machine; exit status 0 only if every check passed
#   bash bench/gpu_check.sh --dry-run    # anywhere: steps 0 only (unpack + build against the prefix)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dry_run=0
[ "${1:-}" = "--dry-run" ] && dry_run=1
OUT="${OUT:-$root/build/gpu-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY="${PYTHON:-python3}"
debs="${CHUTE_GPU_DEBS:-$root/build/gpu-debs}"
prefix="$root/build/gpu-prefix"
build="$root/build/gpu"
results="$OUT/results.txt"
: > "$results"
status=0
started=$(date +%s)
step() { echo; echo "== $* (+$(( $(date +%s) - started ))s)"; }
pass() { echo "PASS $*" | tee -a "$results"; }
fail() { echo "FAIL $*" | tee -a "$results"; status=1; }

step "machine"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv 2>/dev/null || echo "(no nvidia-smi)"
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "cores: $(nproc)"

step "0a. unpack build/gpu-debs into build/gpu-prefix"
[ -f "$debs/SHA256SUMS" ] || { fail "prefix: $debs/SHA256SUMS missing (run scripts/fetch_gpu_debs.sh where apt works)"; exit 1; }
(cd "$debs" && sha256sum --quiet -c SHA256SUMS) || { fail "prefix: the .deb files do not match SHA256SUMS"; exit 1; }
rm -rf "$prefix" && mkdir -p "$prefix"
for deb in "$debs"/*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$prefix" || { fail "prefix: dpkg-deb -x $deb"; exit 1; }
  else  # a .deb is an ar archive holding data.tar.{xz,gz}: read it with Python's standard library
    "$PY" - "$deb" "$prefix" <<'EOF' || { fail "prefix: unpacking $deb"; exit 1; }
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], filter="tar")
    pos += 60 + size + (size % 2)
EOF
  fi
done
lib="$prefix/usr/lib/x86_64-linux-gnu"
inc="$prefix/usr/include"
zlib="$prefix/lib/x86_64-linux-gnu/libz.so.1"  # usr/lib's libz.so is an absolute link to the system's
for f in "$lib/libjpeg.so" "$lib/libpng16.so" "$zlib" "$lib/libwebp.so" "$inc/jpeglib.h" "$inc/png.h" "$inc/zlib.h" \
         "$inc/webp/decode.h" "$inc/xxhash.h" \
         "$inc/x86_64-linux-gnu/jconfig.h" "$prefix/usr/src/googletest/CMakeLists.txt"; do
  [ -e "$f" ] || { fail "prefix: $f missing"; exit 1; }
done
pass "prefix: $(du -sh "$prefix" | cut -f1) unpacked"

step "0b. build chute against the prefix"
nanobind_dir="$("$PY" -m nanobind --cmake_dir 2>/dev/null)" || { fail "build: nanobind not importable by $PY"; exit 1; }
# Explicit paths: nothing is looked up in the system's directories. Debian's static libjpeg.a and libpng16.a
# are not position-independent (they cannot go into the extension), so the prefix's shared libraries are
# linked, and found at run time through the run path CMake gives build-tree binaries. jconfig.h is in the
# multiarch include directory.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUTE_BUILD_TESTS=ON -DCHUTE_BUILD_PYTHON=ON \
  -DCHUTE_BUILD_BENCHMARKS=ON -DPython_EXECUTABLE="$(command -v "$PY")" -Dnanobind_DIR="$nanobind_dir" \
  -DJPEG_INCLUDE_DIR="$inc" -DJPEG_LIBRARY="$lib/libjpeg.so" -DPNG_PNG_INCLUDE_DIR="$inc" \
  -DPNG_LIBRARY="$lib/libpng16.so" -DZLIB_INCLUDE_DIR="$inc" -DZLIB_LIBRARY="$zlib" \
  -DWEBP_INCLUDE_DIR="$inc" -DWEBP_LIBRARY="$lib/libwebp.so" \
  -DXXHASH_INCLUDE_DIR="$inc" -DCMAKE_CXX_FLAGS="-isystem $inc/x86_64-linux-gnu" \
  -DCHUTE_GTEST_SOURCE_DIR="$prefix/usr/src/googletest" > "$OUT/cmake.log" 2>&1 \
  || { tail -30 "$OUT/cmake.log"; fail "build: cmake configure (build/gpu-out/cmake.log)"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target chute_tests chute_h2d_bandwidth _native > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -30; fail "build: compile (build/gpu-out/build.log)"; exit 1; }
so=$(find "$build/python" -maxdepth 1 -name '_native*.so' | head -1)
cp -f "$so" python/chute/
# The proof that the prefix, and not the system, was used: the cache's paths, and the binaries' libjpeg,
# libpng and zlib resolving into the prefix (xxhash is header-only: it must not appear at all).
grep -E "^(JPEG_LIBRARY|JPEG_INCLUDE_DIR|PNG_LIBRARY|ZLIB_LIBRARY|WEBP_LIBRARY|WEBP_INCLUDE_DIR|XXHASH_INCLUDE_DIR|CHUTE_GTEST_SOURCE_DIR)[:=]" \
  "$build/CMakeCache.txt" | tee "$OUT/prefix_proof.txt"
if grep -E "^(JPEG_LIBRARY|PNG_LIBRARY|ZLIB_LIBRARY|WEBP_LIBRARY|WEBP_INCLUDE_DIR|XXHASH_INCLUDE_DIR)[:=]" "$build/CMakeCache.txt" | grep -vq "$prefix"; then
  fail "build: a library outside the prefix was used"
fi
ldd "$so" "$build/cpp/chute_tests" | grep -E "^/|libjpeg|libpng|libz\.|libwebp|libsharpyuv|libxxhash" | tee -a "$OUT/prefix_proof.txt"
if ldd "$so" "$build/cpp/chute_tests" | grep -E "libjpeg|libpng|libz\.|libwebp|libsharpyuv|libxxhash" | grep -v "=> $prefix/" | grep -q .; then
  fail "build: the extension or chute_tests loads a libjpeg/libpng/zlib/libwebp/xxhash from outside the prefix"
else
  pass "build: against $prefix only ($(basename "$so"))"
fi
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import chute.delivery as d; print('chute sees CUDA:', d.cuda_availability())"
if [ "$dry_run" = 1 ]; then
  step "dry run: the decoders built against the prefix, then stop before the GPU checks"
  "$build/cpp/chute_tests" --gtest_filter='JpegDecoder*:PngDecoder*:WebpDecoder*:BatchRing*:CudaDevice*' --gtest_brief=1 \
    > "$OUT/gtest_dry.log" 2>&1 && pass "dry run: C++ decoder and ring tests on the prefix's libraries" \
    || { tail -20 "$OUT/gtest_dry.log"; fail "dry run: C++ tests (gtest_dry.log)"; }
  echo "status $status"
  exit $status
fi

skips_in() {  # skipped test cases in a JUnit XML report
  "$PY" -c "import sys, xml.etree.ElementTree as E; print(sum(1 for c in E.parse(sys.argv[1]).iter('testcase') if c.find('skipped') is not None))" "$1" 2>/dev/null || echo 1
}

step "1. one libcudart; the C++ CUDA tests"
"$build/cpp/chute_tests" --gtest_filter='Cuda*:Delivery*:DeviceSlots*:SimulatedDevice*:BatchRing*' --gtest_output="xml:$OUT/gtest.xml" \
  > "$OUT/gtest.log" 2>&1 || fail "C++ CUDA tests (gtest.log)"
grep -E '^\[ *(FAILED|SKIPPED) ' "$OUT/gtest.log"
skipped=$(skips_in "$OUT/gtest.xml")
[ "$skipped" = 0 ] && grep -q "PASSED" "$OUT/gtest.log" && pass "C++ CUDA tests ran, none skipped" \
  || fail "C++ CUDA tests: $skipped skipped (a skip is a failure here)"
timeout 150 "$PY" -m pytest python/tests/test_device.py -q -rs -p no:cacheprovider -k "gpu_ or cuda_delivers" \
  --junitxml="$OUT/pytest.xml" > "$OUT/pytest.log" 2>&1
rc=$?
tail -15 "$OUT/pytest.log"
skipped=$(skips_in "$OUT/pytest.xml")
[ $rc = 0 ] && [ "$skipped" = 0 ] \
  && pass "Python CUDA tests: one libcudart (1), pinned batches under a lagging stream (2), bf16 on a side stream (3)" \
  || fail "Python CUDA tests: exit $rc, $skipped skipped (pytest.log)"

step "4. H2D bandwidth"
timeout 60 "$build/cpp/bench/chute_h2d_bandwidth" 256 5 40 | tee "$OUT/h2d.txt"
ratio=$(sed -n 's/^H2D_RATIO chute\/pinned=\([0-9.]*\).*/\1/p' "$OUT/h2d.txt")
if [ -n "$ratio" ] && "$PY" -c "import sys; sys.exit(0 if float('$ratio') >= 0.9 else 1)"; then
  pass "H2D: chute/pinned = $ratio (>= 0.9)"
else
  fail "H2D: chute/pinned = ${ratio:-none} (target >= 0.9)"
fi

step "5. ResNet-50 end to end"
remaining=$(( 290 - ($(date +%s) - started) ))
# shellcheck disable=SC2086
timeout $(( remaining > 60 ? remaining : 60 )) "$PY" bench/gpu_train.py --json "$OUT/train.json" \
  --budget $(( remaining > 60 ? remaining - 15 : 45 )) ${CHUTE_GPU_TRAIN_ARGS:-} \
  && pass "training: $(grep -h '^TRAIN' "$OUT/gpu_check.log" | tail -1)" || fail "training (see the log)"

step "done in $(( $(date +%s) - started ))s, status $status"
cat "$results"
exit $status
