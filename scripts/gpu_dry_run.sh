#!/usr/bin/env bash
# The GPU check's dry run on a development machine (docs/GPU.md): bench/gpu_check.sh --dry-run in a private mount
# namespace that looks like the lent GPU machine to the build: every development file the C/C++ tool chain does
# not own (headers, static and link-time libraries, CMake and pkg-config package files, source trees) is hidden
# (scripts/lent_machine_view.py), so that the build succeeds only against the carried .deb prefix, and the check
# fails when configure finds anything outside it. Then every step of the check runs on small sizes without a GPU.
# Needs root (unshare -m); nothing outside the namespace changes. Run scripts/fetch_gpu_debs.sh first, and run this
# again whenever the build's dependencies change.
#   bash scripts/gpu_dry_run.sh    # PYTHON=/path/to/python: the interpreter with torch and nanobind (default:
#                                  # .venv/bin/python when there is one, else python3); OUT=dir for the results
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "gpu_dry_run: needs root for a mount namespace" >&2; exit 2; }
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$root/.venv/bin/python" ] && PYTHON="$root/.venv/bin/python"
fi
export PYTHON
export PATH="$(dirname "$(command -v "$PYTHON")"):$PATH"  # the environment's cmake and ninja, as on the lent machine
exec unshare -m python3 "$root/scripts/lent_machine_view.py" --python "$PYTHON" -- bash "$root/bench/gpu_check.sh" --dry-run
