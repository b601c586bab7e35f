// libFuzzer target: the PNG decoder entry point on its own (chunk walk with CRC checks, IHDR, libpng's
// inflate and row filters, every colour type's conversion to RGB, Adam7, windowed decode). decode_fuzz
// reaches it only through magic-byte dispatch and shares its inputs with JPEG; this target spends its
// whole budget on PNG. The first input byte picks the window; the rest is the file.
#include "chute/decode/png_decoder.h"
#include "window_decode_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_window_decode<chute::PngDecoder>(data, size);
}
