// libFuzzer target: an HDF5 file's global heap collections as the HDF5 reader resolves a variable-length
// dataset's elements in them (hdf5_vlen_spans), and fixed-length elements' trimming (hdf5_fixed_spans).
// The input's first 2 bytes give the stored elements' size (taken from its end); the rest is the file.
// Every span returned is read back, so ASan sees any range outside the input.
// Seeds: scripts/make_fuzz_corpus.py (OUT/hdf5_heap: h5py files of variable-length images, with elements).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "chute/formats/hdf5_heap.h"

namespace {

void check(std::span<const uint8_t> file, const chute::Result<chute::Hdf5Spans>& result) {
  if (!result.is_ok()) return;
  const chute::Hdf5Spans& spans = result.value();
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < spans.offsets.size(); ++i) {
    if (spans.offsets[i] > file.size() || spans.lengths[i] > file.size() - spans.offsets[i]) std::abort();
    for (uint64_t b = 0; b < spans.lengths[i]; ++b) sink = sink ^ file[spans.offsets[i] + b];
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t stored = (static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8) % (size - 1);
  const std::span<const uint8_t> rest(data + 2, size - 2);
  const auto file = rest.first(rest.size() - stored), elements = rest.last(stored);
  check(file, chute::hdf5_vlen_spans(file, elements, 8, 8));
  check(file, chute::hdf5_vlen_spans(file, elements, 4, 4));
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i + 8 <= elements.size() && offsets.size() < 64; i += 8)
    offsets.push_back((static_cast<uint64_t>(elements[i]) | static_cast<uint64_t>(elements[i + 1]) << 8) %
                      (file.size() + 1));
  check(file, chute::hdf5_fixed_spans(file, offsets, stored % 512));
  return 0;
}
