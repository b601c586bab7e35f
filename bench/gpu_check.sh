#!/usr/bin/env bash
# The GPU check: one command, on the machine this project can be lent (docs/GPU.md): one NVIDIA GPU, 16 cores, no
# network, Python 3.12 with a CUDA torch, torchvision, nanobind, scikit-build-core, cmake, ninja, pytest, nvcc,
# and no development files for chute's libraries. What it needs beyond that travels with the working tree:
# build/gpu-debs, made here by scripts/fetch_gpu_debs.sh.
#
#   0. unpacks the .deb files into build/gpu-prefix and builds chute against that prefix only, with the machine's
#      own compiler, Python, torch and nanobind; fails if configure found anything outside the prefix (beyond the
#      compiler, Python, nanobind and the CUDA toolkit), or if a built binary loads anything but the prefix's
#      libraries and the C/C++ run time; points chute's tests at the libcudart torch uses ($CHUTE_CUDART)
#   1. then bench/gpu_check.py runs, each with a time limit inside the budget: the C++ and Python CUDA tests (a
#      skip fails unless its reason says the test is for the other kind of machine), the photos, H2D bandwidth
#      through chute's delivery path against cudaMemcpyAsync (bench/../cpp/bench/h2d_bandwidth.cc), the delivery
#      checks at 256 x 224^2 (bench/gpu_delivery.py), ResNet-50 training (bench/gpu_train.py), CPU scaling
#      (bench/cpu_scaling.py)
# Results in $OUT (default build/gpu-out), four files: gpu_check.json (every step, check, figure, target and
# wall time), gpu_check.md (the summary), gpu_check.log (everything printed), logs.tar.gz (each step's log, the
# CMake and build logs, the JUnit reports, the prefix proof). Exit status 0 when every check passed.
#
#   bash bench/gpu_check.sh             # on the GPU machine; budget $CHUTE_GPU_BUDGET seconds (default 330)
#   bash bench/gpu_check.sh --dry-run   # anywhere, no GPU: the same steps on small sizes, chute's simulated
#                                       # device for the GPU (scripts/gpu_dry_run.sh runs it with the system's
#                                       # development files hidden)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dry_run=0
[ "${1:-}" = "--dry-run" ] && dry_run=1
started=$(date +%s.%N)
budget="${CHUTE_GPU_BUDGET:-$([ $dry_run = 1 ] && echo 3600 || echo 330)}"
deadline=$(awk -v s="$started" -v b="$budget" 'BEGIN { printf "%.0f", s + b }')
OUT="${OUT:-$root/build/gpu-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
tee_pid=$!
PY="$(command -v "${PYTHON:-python3}")"
debs="${CHUTE_GPU_DEBS:-$root/build/gpu-debs}"
prefix="$root/build/gpu-prefix"
build="$root/build/gpu"
work="$root/build/gpu-work"
rm -rf "$work" && mkdir -p "$work"
smoke=$([ $dry_run = 1 ] && echo --smoke)
step_started=$(date +%s.%N)
say() { echo; echo "== $* (+$(awk -v s="$started" -v n="$(date +%s.%N)" 'BEGIN { printf "%.0f", n - s }')s)"; step_started=$(date +%s.%N); }
record() {  # record STEP STATUS DETAIL [FIGURES_JSON]
  local wall figures="${4:-}"
  wall=$(awk -v s="$step_started" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }')
  "$PY" bench/gpu_check.py record --work "$work" --step "$1" --status "$2" --wall "$wall" --detail "$3" \
    --figures "${figures:-"{}"}"
  echo "$2 $1 (${wall} s): $3"
}
finish() {
  tar -czf "$OUT/logs.tar.gz" -C "$work" --exclude=./photos --exclude=./py . 2>/dev/null
  "$PY" bench/gpu_check.py report --work "$work" --out "$OUT" --budget "$budget" --started "$started" $smoke
  local rc=$?
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null  # gpu_check.log complete before the command returns
  exit $rc
}

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
# The libcudart torch uses: chute's C++ tests and the H2D bench (no torch in them) load the same one. With CUDA
# from pip wheels it sits in site-packages/nvidia/..., off the loader's path. (A torch with the runtime linked in
# maps none: then the tests look on the loader's path, as chute does.)
machine=$("$PY" - <<'EOF'
import json, os, sys
import torch
cudart = None
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")
    cudart = next((l.split()[-1] for l in open("/proc/self/maps") if "libcudart.so" in l), None)
print(json.dumps({"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  "cores": len(os.sched_getaffinity(0)), "python": sys.version.split()[0], "torch": torch.__version__,
                  "cuda": torch.version.cuda, "cudart": cudart}))
EOF
) || machine='{}'
echo "$machine"
cudart=$(echo "$machine" | "$PY" -c "import json, sys; print(json.load(sys.stdin).get('cudart') or '')")
[ -n "$cudart" ] && export CHUTE_CUDART="$cudart"
record machine PASS "python $PY; CHUTE_CUDART=${CHUTE_CUDART:-unset}" "$machine"

say "prefix: unpack $debs into $prefix"
if [ ! -f "$debs/SHA256SUMS" ]; then
  record prefix FAIL "$debs/SHA256SUMS missing (run scripts/fetch_gpu_debs.sh where apt works)"; finish
fi
(cd "$debs" && sha256sum --quiet -c SHA256SUMS) || { record prefix FAIL "the .deb files do not match SHA256SUMS"; finish; }
rm -rf "$prefix" && mkdir -p "$prefix"
for deb in "$debs"/*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$prefix" || { record prefix FAIL "dpkg-deb -x $deb"; finish; }
  else  # a .deb is an ar archive holding data.tar.{xz,gz}: read it with Python's standard library
    "$PY" - "$deb" "$prefix" <<'EOF' || { record prefix FAIL "unpacking $deb"; finish; }
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
# What each package holds is not listed again here: configure and the build find out, against the prefix alone.
record prefix PASS "$(ls "$debs"/*.deb | wc -l) packages, $(du -sh "$prefix" | cut -f1) unpacked"

say "configure: chute against the prefix only"
nanobind_dir="$("$PY" -m nanobind --cmake_dir 2>/dev/null)" || { record configure FAIL "nanobind not importable by $PY"; finish; }
# Explicit paths: nothing of chute's is looked up in the system's directories. Debian's static libjpeg.a and
# libpng16.a are not position-independent (they cannot go into the extension), so the prefix's shared libraries
# are linked, and found at run time through the run path CMake gives build-tree binaries. jconfig.h is in the
# multiarch include directory.
rm -f "$build/CMakeCache.txt"  # configured afresh; objects of an earlier run on this machine are reused
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUTE_BUILD_TESTS=ON -DCHUTE_BUILD_PYTHON=ON \
  -DCHUTE_BUILD_BENCHMARKS=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON -DCHUTE_CHECK_CURL_DECLARATIONS=OFF \
  -DPython_EXECUTABLE="$PY" -Dnanobind_DIR="$nanobind_dir" \
  -DJPEG_INCLUDE_DIR="$inc" -DJPEG_LIBRARY="$lib/libjpeg.so" -DPNG_PNG_INCLUDE_DIR="$inc" \
  -DPNG_LIBRARY="$lib/libpng16.so" -DZLIB_INCLUDE_DIR="$inc" -DZLIB_LIBRARY="$zlib" \
  -DWEBP_INCLUDE_DIR="$inc" -DWEBP_LIBRARY="$lib/libwebp.so" -DXXHASH_INCLUDE_DIR="$inc" \
  -DZSTD_INCLUDE_DIR="$inc" -DZSTD_LIBRARY="$lib/libzstd.so" -DCMAKE_CXX_FLAGS="-isystem $inc/x86_64-linux-gnu" \
  -DCHUTE_GTEST_SOURCE_DIR="$prefix/usr/src/googletest" > "$work/cmake.log" 2>&1 \
  || { tail -30 "$work/cmake.log"; record configure FAIL "cmake configure failed: $(grep -m1 -A2 'CMake Error' "$work/cmake.log" | tr '\n' ' ')"; finish; }
# Every path configure found must be the prefix's, or the machine's compiler, Python, nanobind or CUDA toolkit:
# anything else is a dependency the lent machine lacks (the dry run hides it) or one the prefix should carry.
grep -E '^[A-Za-z_0-9]+:(FILEPATH|PATH|UNINITIALIZED)=/' "$build/CMakeCache.txt" > "$work/prefix_proof.txt"
outside=$(grep -vE '^(CMAKE_|_?Python|nanobind_|CUDAToolkit_|CUDA_)' "$work/prefix_proof.txt" | grep -vF "=$prefix")
if [ -n "$outside" ]; then
  echo "$outside"
  record configure FAIL "found outside the prefix: $(echo "$outside" | tr '\n' ' ')"; finish
fi
record configure PASS "every library and header from the prefix ($(grep -cF "=$prefix" "$work/prefix_proof.txt") cache entries); CUDA toolkit: $(grep -m1 '^CUDAToolkit_BIN_DIR' "$build/CMakeCache.txt" | cut -d= -f2 || echo none)"

say "build"
cmake --build "$build" -j "$(nproc)" --target chute_tests chute_h2d_bandwidth _native > "$work/build.log" 2>&1 \
  || { grep -E "error|Error" "$work/build.log" | head -30; record build FAIL "compile failed (build.log): $(grep -m1 'error' "$work/build.log")"; finish; }
so=$(find "$build/python" -maxdepth 1 -name '_native*.so' | head -1)
# At run time too: every library the binaries load is the prefix's or the C/C++ run time's.
runtime='^(linux-vdso|libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so|ld-linux|libdl\.so|libpthread\.so|librt\.so)'
ldd "$so" "$build/cpp/chute_tests" "$build/cpp/bench/chute_h2d_bandwidth" | tee -a "$work/prefix_proof.txt" > "$work/ldd.txt"
foreign=$(grep '=>' "$work/ldd.txt" | grep -v "=> $prefix/" | awk '{print $1}' | grep -vE "$runtime" | sort -u)
if [ -n "$foreign" ] || grep -q "not found" "$work/ldd.txt"; then
  record build FAIL "loads from outside the prefix: $(echo "$foreign" | tr '\n' ' ') $(grep 'not found' "$work/ldd.txt" | tr '\n' ' ')"; finish
fi
record build PASS "chute_tests, chute_h2d_bandwidth, $(basename "$so"): the prefix's libraries and the C/C++ run time only"
# The package as the steps import it: python/chute with this extension (the working tree stays as it is).
mkdir -p "$work/py" && cp -r python/chute "$work/py/" && rm -f "$work/py/chute/"_native*.so && cp "$so" "$work/py/chute/"
export PYTHONPATH="$work/py${PYTHONPATH:+:$PYTHONPATH}"

say "steps (bench/gpu_check.py run)"
"$PY" bench/gpu_check.py run --work "$work" --build "$build" --deadline "$deadline" $smoke
finish
