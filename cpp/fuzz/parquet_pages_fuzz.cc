// libFuzzer target: a Parquet column chunk's pages (scan_parquet_chunk), as the Parquet reader runs it on a
// mapped file with the chunk's place from the footer. The input's first byte is the maximum definition
// level (mod 4), the next 4 the chunk's value count; the rest is the chunk. Every span returned is read
// back, so ASan sees any range outside the input.
// Seeds: scripts/make_fuzz_corpus.py (OUT/parquet_pages: image column chunks written by datasets and pyarrow).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "chute/formats/parquet_pages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const int max_def = data[0] % 4;
  const uint64_t values = static_cast<uint64_t>(data[1]) | static_cast<uint64_t>(data[2]) << 8 |
                          static_cast<uint64_t>(data[3]) << 16 | static_cast<uint64_t>(data[4] & 0x0f) << 24;
  const std::span<const uint8_t> file(data + 5, size - 5);
  chute::ParquetValues out;
  const chute::ParquetChunk chunk{
      .offset = 0, .size = file.size(), .num_values = values, .max_definition_level = max_def};
  if (!chute::scan_parquet_chunk(file, chunk, "fuzz.parquet", out).is_ok()) return 0;
  if (out.offsets.size() != values || out.lengths.size() != values) std::abort();
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < out.offsets.size(); ++i) {
    if (out.offsets[i] > file.size() || out.lengths[i] > file.size() - out.offsets[i]) std::abort();
    for (uint64_t b = 0; b < out.lengths[i]; ++b) sink = sink ^ file[out.offsets[i] + b];
  }
  return 0;
}
