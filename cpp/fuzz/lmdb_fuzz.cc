// libFuzzer target: an LMDB data file's B+tree walk (read_lmdb), as the LMDB source's scan runs it on a
// mapped data.mdb, then each value through the layout parsers (pickle and Caffe Datum).
// Every key and value returned is read back, so ASan sees any range outside the input.
// Seeds: scripts/make_fuzz_corpus.py (OUT/lmdb: data.mdb files written by py-lmdb).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "chute/formats/caffe_datum.h"
#include "chute/formats/lmdb_file.h"
#include "chute/formats/pickle_span.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  auto db = chute::read_lmdb(file, "fuzz.mdb");
  if (!db.is_ok()) return 0;
  volatile uint8_t sink = 0;
  for (const chute::LmdbRecord& r : db->records) {
    if (r.key.data() < data || r.key.data() + r.key.size() > data + size) std::abort();
    if (r.value_offset > size || r.value_size > size - r.value_offset) std::abort();
    for (uint8_t b : r.key) sink = sink ^ b;
    const auto value = file.subspan(r.value_offset, r.value_size);
    for (uint8_t b : value) sink = sink ^ b;
    (void)chute::parse_pickle(value);
    (void)chute::parse_datum(value);
  }
  return 0;
}
