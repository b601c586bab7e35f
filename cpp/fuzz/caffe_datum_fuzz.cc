// libFuzzer target: Caffe's Datum parsed in place (parse_datum), as the LMDB source's scan runs it on each
// value. The data span is read back (inside the input, or ASan says so).
// Seeds: scripts/make_fuzz_corpus.py (OUT/caffe_datum).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "chute/formats/caffe_datum.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto datum = chute::parse_datum({data, size});
  if (!datum.is_ok()) return 0;
  if (!datum->data.empty() && (datum->data.data() < data || datum->data.data() + datum->data.size() > data + size))
    std::abort();
  volatile uint8_t sink = 0;
  for (uint8_t b : datum->data) sink = sink ^ b;
  return 0;
}
