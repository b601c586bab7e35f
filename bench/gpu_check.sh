#!/usr/bin/env bash
# GPU delivery on a machine with a CUDA GPU, in one run of under 5 minutes:
#   1. builds chute (scripts/setup.sh: venv + chute; the C++ tests and the H2D benchmark with CMake);
#   2. runs the CUDA tests: C++ (CudaDeviceTest, CudaGpuTest, and the simulated-device protocol tests) and
#      Python (test_device.py, whose CUDA cases run only where a GPU is);
#   3. measures H2D bandwidth: chute's ring and delivery calls vs cudaMemcpy from pinned and from pageable
#      memory (cpp/bench/h2d_bandwidth.cc);
#   4. trains ResNet-18 on synthetic 224x224 JPEGs fed by chute (device='cuda') vs the DataLoader at its best
#      num_workers (bench/gpu_train.py): img/s and GPU-idle fraction.
# setup.sh needs torch, nanobind and the build tools installable (a local index or the pip cache) unless
# .venv already exists; CHUTE_VENV=/path/to/env points it at one made beforehand.
# Everything it prints also goes to gpu_check.log. Exits non-zero if a step fails; the steps after a failed
# test still run, so that one failure does not hide the figures.
#   bash bench/gpu_check.sh            # CHUTE_GPU_TRAIN_ARGS="--steps 20" to shorten the training runs
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
exec > >(tee gpu_check.log) 2>&1
status=0
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

step "GPU"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv 2>/dev/null || echo "(no nvidia-smi)"

step "build"
bash scripts/setup.sh || { echo "setup failed"; exit 1; }
export PATH="${CHUTE_VENV:-$here/.venv}/bin:$PATH"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUTE_BUILD_TESTS=ON -DCHUTE_BUILD_BENCHMARKS=ON >/dev/null \
  && cmake --build build/gpu --target chute_tests chute_h2d_bandwidth || { echo "build failed"; exit 1; }
python -c "import chute, chute.delivery as d; print('chute sees CUDA:', d.cuda_availability())"

step "CUDA tests (C++)"
# GTEST_SKIP counts as a skip: on a GPU machine the CudaGpuTest cases must say RUN ... OK, not SKIPPED.
build/gpu/cpp/chute_tests --gtest_filter='Cuda*:Delivery*:SimulatedDevice*:Numa*' --gtest_brief=0 2>&1 \
  | grep -E '^\[ *(RUN|OK|SKIPPED|FAILED|PASSED) |Skipped|Failure' || true
build/gpu/cpp/chute_tests --gtest_filter='Cuda*:Delivery*:SimulatedDevice*:Numa*' >/dev/null 2>&1 || { echo "C++ tests FAILED"; status=1; }

step "CUDA tests (Python)"
python -m pytest python/tests/test_device.py -q -rs -p no:cacheprovider || status=1

step "H2D bandwidth"
build/gpu/cpp/bench/chute_h2d_bandwidth 256 5 40 || status=1

step "ResNet-18 training: chute vs DataLoader"
# shellcheck disable=SC2086
timeout 200 python bench/gpu_train.py ${CHUTE_GPU_TRAIN_ARGS:-} || status=1

step "done (status $status); the figures: grep -E 'H2D_RATIO|TRAIN_RATIO' gpu_check.log"
exit $status
