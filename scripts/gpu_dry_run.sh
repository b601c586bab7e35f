#!/usr/bin/env bash
# The GPU check's dry run on a development machine (docs/GPU.md): bench/gpu_check.sh --dry-run inside a
# private mount namespace in which this machine's libjpeg / libpng / zlib / libwebp / xxhash / googletest development
# files (headers, static libraries, googletest's sources and CMake configs) are hidden behind empty files, so that the build
# can only succeed against the unpacked .deb prefix, as on the lent GPU machine. Needs root (unshare -m);
# nothing outside the namespace changes. Run scripts/fetch_gpu_debs.sh first.
#   bash scripts/gpu_dry_run.sh   # PYTHON=/path/to/python to pick the interpreter with torch and nanobind
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "gpu_dry_run: needs root for a mount namespace" >&2; exit 2; }
exec unshare -m bash -c '
set -euo pipefail
mount --make-rprivate /
hidden=0
empty=$(mktemp -d)
for f in /usr/include/{jpeglib.h,jerror.h,jmorecfg.h,png.h,pngconf.h,pnglibconf.h,zlib.h,zconf.h,xxhash.h,xxh3.h} \
         /usr/include/x86_64-linux-gnu/jconfig.h \
         /usr/lib/x86_64-linux-gnu/lib{jpeg,png,png16,z,webp,sharpyuv,xxhash,gtest,gtest_main}.{a,so}; do
  # A symbolic link (libz.so -> libz.so.1...) cannot be covered without covering the run-time library it
  # names, which the tools in this namespace load: those stay, and ldd in gpu_check.sh shows they are unused.
  if [ -e "$f" ] && [ ! -d "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; hidden=$((hidden + 1)); fi
done
for d in /usr/include/gtest /usr/lib/x86_64-linux-gnu/cmake/GTest /usr/src/googletest /usr/include/libpng16 /usr/include/webp; do
  if [ -d "$d" ]; then mount --bind "$empty" "$d"; hidden=$((hidden + 1)); fi
done
echo "gpu_dry_run: $hidden system development files hidden in this namespace"
exec bash "$0" --dry-run
' "$root/bench/gpu_check.sh"
