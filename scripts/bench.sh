#!/usr/bin/env bash
# Sets up (scripts/setup.sh, idempotent) and runs `chute bench` on its generated default dataset.
# Extra arguments go to `chute bench` (see `chute bench --help`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
exec "$here/.venv/bin/chute" bench "$@"
