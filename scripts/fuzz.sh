#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build/fuzz, writes the seed corpus, and runs each
# target for a while. CI runs it with the default 30 s per target as a regression check; a real
# campaign passes a longer time. New inputs found accumulate in build/fuzz/work/<target>; a crash stops
# the run, leaves crash-* in build/fuzz/artifacts/ and fails the script.
#   scripts/fuzz.sh                  # every target, 30 s each
#   scripts/fuzz.sh 600 png_fuzz     # one target for 10 minutes
# Prints one line per target: its executions, time and whether it crashed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
seconds="${1:-30}"
shift || true
export PATH="$here/.venv/bin:$PATH"

CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHUTE_BUILD_FUZZERS=ON \
  -DCHUTE_BUILD_TESTS=OFF -DCHUTE_SANITIZE=address,undefined >/dev/null
cmake --build build/fuzz
python scripts/make_fuzz_corpus.py build/fuzz/corpus

targets=("$@")
((${#targets[@]})) || targets=(decode_fuzz png_fuzz webp_fuzz raw_fuzz exif_fuzz shard_fuzz tar_fuzz s3_xml_fuzz url_pattern_fuzz
  tfrecord_fuzz lmdb_fuzz pickle_span_fuzz caffe_datum_fuzz)
mkdir -p build/fuzz/artifacts
status=0
for t in "${targets[@]}"; do
  seeds="build/fuzz/corpus/${t%_fuzz}"
  work="build/fuzz/work/$t"
  mkdir -p "$work"
  log="build/fuzz/$t.log"
  start=$(date +%s)
  # halt_on_error: a UBSan report is a crash, not a line in the log.
  if UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "build/fuzz/cpp/fuzz/$t" "$work" "$seeds" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix=build/fuzz/artifacts/ >"$log" 2>&1; then
    verdict="no crash"
  else
    verdict="CRASH (see $log)"
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $t: ${execs:-?} executions in $(($(date +%s) - start)) s, $(ls "$work" | wc -l) corpus files, $verdict"
done
exit $status
