// libFuzzer target: the pickle opcode machine (parse_pickle) that finds the image inside an LMDB record
// without unpickling. Every bytes/str span in the result is read back (inside the input, or ASan says so).
// Seeds: scripts/make_fuzz_corpus.py (OUT/pickle_span: pickle.dumps of the layouts, protocols 2 to 5).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "chute/formats/pickle_span.h"

namespace {

void visit(const chute::PickleValue& v, const uint8_t* begin, const uint8_t* end, volatile uint8_t& sink) {
  if (!v.bytes.empty() && (v.bytes.data() < begin || v.bytes.data() + v.bytes.size() > end)) std::abort();
  for (uint8_t b : v.bytes) sink = sink ^ b;
  for (const chute::PickleValue& item : v.items) visit(item, begin, end, sink);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto value = chute::parse_pickle({data, size});
  if (!value.is_ok()) return 0;
  volatile uint8_t sink = 0;
  visit(*value, data, data + size, sink);
  return 0;
}
