// libFuzzer target: TFRecord framing (scan_tfrecord: each length and its CRC), then every record's CRC check
// and tf.train.Example parse (parse_example), as the TFRecord source's scan and reads run them.
// Every span returned is read back, so ASan sees any range outside the input.
// Seeds: scripts/make_fuzz_corpus.py (OUT/tfrecord).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "chute/formats/tf_example.h"
#include "chute/formats/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  auto records = chute::scan_tfrecord(file, "fuzz.tfrecord");
  if (!records.is_ok()) return 0;
  volatile uint8_t sink = 0;
  for (const chute::TfRecord& r : *records) {
    if (r.offset > size || r.size + chute::kTfRecordFooterSize > size - r.offset) std::abort();
    (void)chute::check_tfrecord_crc(file.subspan(r.offset, r.size + chute::kTfRecordFooterSize));
    auto features = chute::parse_example(file.subspan(r.offset, r.size));
    if (!features.is_ok()) continue;
    for (const chute::ExampleFeature& f : *features) {
      for (char c : f.name) sink = sink ^ static_cast<uint8_t>(c);
      for (uint8_t b : f.first_bytes) sink = sink ^ b;
    }
  }
  return 0;
}
