// libFuzzer target: the WebP decoder entry point on its own (RIFF and VP8/VP8L/VP8X headers through
// libwebp, the pixel cap, the whole-image decode and the window view into it). decode_fuzz reaches it only
// through magic-byte dispatch; this target spends its whole budget on WebP. The first input byte picks
// the window; the rest is the file.
#include "chute/decode/webp_decoder.h"
#include "window_decode_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_window_decode<chute::WebpDecoder>(data, size);
}
