#!/usr/bin/env bash
# Downloads the Debian packages that bench/gpu_check.sh needs on the lent GPU machine, which has no network and
# no development files for chute's libraries (docs/GPU.md): the -dev and run-time packages of every library in
# cmake/ChuteDependencies.cmake (libjpeg-turbo, libpng and zlib, libwebp, xxHash, zstd), and googletest's
# sources (the C++ tests are built there with its own compiler). Run here, on the Debian development machine;
# the files land in build/gpu-debs (ignored by git, ~4 MB, far under the 64 MiB that may travel with the working
# tree). Nothing is installed. When a dependency is added, add its packages here: scripts/gpu_dry_run.sh, which
# hides everything else, fails until then.
#   bash scripts/fetch_gpu_debs.sh [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/build/gpu-debs}"
mkdir -p "$out"
cd "$out"
rm -f ./*.deb
packages=(libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev zlib1g zlib1g-dev libwebp7 libwebp-dev
          libxxhash0 libxxhash-dev libzstd1 libzstd-dev googletest)
# apt-get download fetches exactly these versions (the candidate of this machine's sources), not their
# dependencies: the list above is the closure the build needs beyond glibc and libstdc++.
apt-get download "${packages[@]}" 2> >(grep -v "^W: Download is performed unsandboxed" >&2)
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || { echo "fetch_gpu_debs: $p did not download" >&2; exit 1; }
done
# "%3a" (an epoch colon) in a file name: plain names travel everywhere.
for f in ./*%3a*.deb; do [ -e "$f" ] && mv -f "$f" "${f//%3a/_}"; done
sha256sum ./*.deb > SHA256SUMS
du -sh "$out" | awk '{print "fetch_gpu_debs: " $1 " in " $2}'
