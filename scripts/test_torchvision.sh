#!/usr/bin/env bash
# The real-torchvision test tier: chute's DataLoader fast path against the torchvision and Pillow that users
# have (torch 2.14.1, torchvision 0.29.1, Pillow 13), not only against the PIL reference
# (python/chute/bench/pil_reference.py) that the main venv (torch 2.13, no torchvision) tests with.
#
#   bash scripts/test_torchvision.sh            # set up .venv-tv (idempotent), install chute into it, test
#   CHUTE_TV_VENV=/path bash scripts/test_torchvision.sh
#
# 1. .venv-tv (gitignored): torch==2.14.1 torchvision==0.29.1 and chute's dependencies, plus the build tools
#    for a --no-build-isolation install of chute (incremental, in build/pip-tv).
# 2. pytest against the installed chute with real torchvision: test_torchvision_real.py (v1 and v2
#    pipelines, decode_image, through torch's DataLoader and chute's), test_fastpath_folder.py,
#    test_parity.py (Pillow 13's arithmetic), test_dropin_real.py, test_batch_mix.py (v2 MixUp / CutMix) and
#    test_stateful_real.py (state_dict() against torchdata's StatefulDataLoader).
# 3. test_parity.py again with Pillow 11.3 put first on the path (build/pillow-11.3): chute follows the
#    installed Pillow's resampling arithmetic, so both must be bit-exact.
# Prints the tier's run time at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
start=$(date +%s)
venv="${CHUTE_TV_VENV:-$here/.venv-tv}"
py="$venv/bin/python"

if [ ! -x "$py" ]; then
  echo "test_torchvision: creating $venv"
  python3 -m venv "$venv"
fi
# torchdata: its StatefulDataLoader is what chute.DataLoader's state_dict() is checked against
# (test_stateful_real.py); 0.11.0 is the last release, pure Python, torch>=2.
reqs=(torch==2.14.1 torchvision==0.29.1 torchdata==0.11.0 numpy pillow rich pytest nanobind scikit-build-core cmake ninja)
if ! "$py" - "${reqs[@]}" <<'EOF'
import sys
from importlib import metadata
for req in sys.argv[1:]:
    name, _, version = req.partition("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if version and have.split("+")[0] != version:
        sys.exit(1)
EOF
then
  echo "test_torchvision: installing ${reqs[*]} (torch and torchvision are large: a few minutes)"
  "$py" -m pip install -q "${reqs[@]}"
fi

echo "== chute into $venv (build/pip-tv)"
launcher=()
if command -v ccache >/dev/null; then launcher=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
"$py" -m pip install -q --no-deps --no-build-isolation -Cbuild-dir=build/pip-tv "${launcher[@]}" .
"$py" - <<'EOF'
import PIL, torch, torchvision
import chute
from chute import resampling
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow {PIL.__version__}, "
      f"chute {chute.__version__} from {chute.__file__}; resample pass order {resampling.pass_order()}")
EOF

tests=(python/tests/test_torchvision_real.py python/tests/test_fastpath_folder.py python/tests/test_parity.py
       python/tests/test_dropin_real.py python/tests/test_batch_mix.py python/tests/test_stateful_real.py)
echo "== pytest with real torchvision and Pillow 13: ${tests[*]}"
# -p no:cacheprovider: leave no .pytest_cache behind; the tests import the installed chute, not python/.
"$py" -m pytest -q -p no:cacheprovider "${tests[@]}"

old_pillow="$here/build/pillow-11.3"
if [ ! -f "$old_pillow/PIL/__init__.py" ]; then
  "$py" -m pip install -q --no-deps --target "$old_pillow" pillow==11.3.0
fi
echo "== pytest with Pillow 11.3 (before Pillow 13's change of pass order): python/tests/test_parity.py"
PYTHONPATH="$old_pillow" "$py" -m pytest -q -p no:cacheprovider python/tests/test_parity.py

echo "test_torchvision: passed in $(( $(date +%s) - start )) s"
