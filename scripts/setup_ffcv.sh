#!/usr/bin/env bash
# Optional: a separate virtual environment with FFCV, for the FFCV row of `chute bench --sweep-storage
# --ffcv-python .venv-ffcv/bin/python`. Idempotent. Kept apart from chute's venv: ffcv pulls its own torch,
# numba (which pins numpy) and opencv-python. Needs Debian 12's libopencv-dev and libturbojpeg0-dev (ffcv's
# setup.py finds them with pkg-config; without them `pip install ffcv` fails with "Could not find required
# package: opencv4"), and Pillow, which ffcv imports but does not declare.
#   scripts/setup_ffcv.sh       # venv at $CHUTE_FFCV_VENV, else .venv-ffcv
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
apt_pkgs=(pkg-config libopencv-dev libturbojpeg0-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup_ffcv: installing system packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
venv="${CHUTE_FFCV_VENV:-$here/.venv-ffcv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import ffcv.loader, PIL" 2>/dev/null; then
  echo "setup_ffcv: installing ffcv and pillow into $venv"
  "$venv/bin/python" -m pip install -q ffcv pillow
fi
echo "setup_ffcv: chute bench --sweep-storage --ffcv-python $venv/bin/python"
