// libFuzzer target: the raw-record decoder (raw_image.h) on its own: the header checks (sizes, pixel byte
// count, the zstd frame's recorded content size, the pixel cap) and the zstd stream stopped at a window's
// last row. decode_fuzz reaches it only through magic-byte dispatch. The first input byte picks the
// window; the rest is the payload.
#include "chute/decode/raw_image.h"
#include "window_decode_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_window_decode<chute::RawDecoder>(data, size);
}
