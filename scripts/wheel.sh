#!/usr/bin/env bash
# Builds a self-contained wheel in dist/: `pip wheel`, then `auditwheel repair`, which copies the shared
# libraries chute links (libjpeg-turbo, libpng, libwebp, libzstd, zlib) into the wheel (chute.libs/) and retags it manylinux_*.
#   scripts/wheel.sh            # build dist/chute-*-manylinux_*.whl
#   scripts/wheel.sh --check    # then install it into a new venv beside torch and check it (below)
# The check: `auditwheel show` names a manylinux tag; ldd of the installed extension, with LD_LIBRARY_PATH
# unset, resolves every library outside the manylinux platform inside the installed wheel. The platform
# (auditwheel's whitelist, which every manylinux system provides) is glibc, the C++ runtime and zlib: auditwheel
# leaves libz.so.1 out of the wheel on purpose, so libpng's zlib comes from the system, as for every
# manylinux wheel; `import chute` and one Loader epoch over a generated folder work there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
# Only what building the wheel needs (setup.sh --wheel): not the developer tools of --dev.
bash scripts/setup.sh --wheel
export PATH="${CHUTE_VENV:-$here/.venv}/bin:$PATH"
unset LD_LIBRARY_PATH

raw="build/wheel/raw"
rm -rf "$raw" && mkdir -p "$raw" dist
echo "wheel: building"
python -m pip wheel -q --no-deps --no-build-isolation -Cbuild-dir=build/wheel/build -w "$raw" .
echo "wheel: repairing (bundling the non-glibc libraries)"
rm -f dist/chute-*.whl
auditwheel repair -w dist "$raw"/chute-*.whl
whl=$(ls dist/chute-*.whl)
auditwheel show "$whl" | tee build/wheel/show.txt
grep -q "manylinux_" build/wheel/show.txt || { echo "wheel: not a manylinux wheel" >&2; exit 1; }
echo "wheel: $whl"

[ "${1:-}" = "--check" ] || exit 0

venv="build/wheel/venv"
rm -rf "$venv"
python3 -m venv "$venv"
# torch 2.13.0: the local CPU build (pip takes it from this machine's files); the rest from PyPI.
"$venv/bin/python" -m pip install -q "$whl" torch==2.13.0
so=$(ls "$venv"/lib/python3*/site-packages/chute/_native*.so)
site=$(cd "$(dirname "$so")/.." && pwd)
echo "wheel: ldd $so"
bad=0
while read -r name _ path _; do
  case "$name" in
    linux-vdso*|*ld-linux*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*|libz.so.1) continue ;;
  esac
  case "$path" in
    "$site"/*) echo "  $name -> inside the wheel" ;;
    *) echo "  $name -> $path: NOT inside the wheel" >&2; bad=1 ;;
  esac
done < <(ldd "$so" | grep "=>")
[ "$bad" = 0 ] || { echo "wheel: the extension needs libraries from outside the wheel" >&2; exit 1; }
(cd /tmp && "$here/$venv/bin/python" - "$here/$venv" <<'PY'
import sys, tempfile, pathlib
import numpy as np
from PIL import Image
import torch, chute
print("wheel: chute", chute.__version__, "from", chute.__file__)
root = pathlib.Path(tempfile.mkdtemp())
rng = np.random.default_rng(0)
for c in range(2):
    (root / f"c{c}").mkdir()
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(root / f"c{c}" / f"{i}.jpg")
        Image.fromarray(rng.integers(0, 255, (50, 40, 3), dtype=np.uint8)).save(root / f"c{c}" / f"{i}.png")
n = 0
with chute.Loader(chute.ImageFolder(str(root)), batch_size=8, transforms=[chute.Resize(32), chute.CenterCrop(32)]) as loader:
    for images, labels in loader:
        assert images.shape[1:] == (3, 32, 32) and images.dtype == torch.uint8
        n += len(labels)
assert n == 32, n
print("wheel: one Loader epoch of", n, "images: ok")
PY
)
"$venv/bin/chute" --version
echo "wheel: check passed"
