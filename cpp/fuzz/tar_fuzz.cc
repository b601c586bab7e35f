// libFuzzer target: the tar member parser, link resolution and WebDataset grouping (scan_tar), as
// TarSource runs it on a mapped tar file.
// Every sample it returns is read back, so ASan sees any range outside the input.
// Seeds: scripts/make_fuzz_corpus.py (OUT/tar).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "chute/io/tar_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> tar(data, size);
  auto scan = chute::scan_tar(tar, "fuzz.tar");
  if (!scan.is_ok()) return 0;
  volatile uint8_t sink = 0;
  for (const chute::TarSample& s : scan->samples) {
    if (s.offset > size || s.size > size - s.offset) std::abort();  // a sample outside the file: a bug
    for (uint8_t b : tar.subspan(s.offset, s.size)) sink = sink ^ b;
  }
  return 0;
}
