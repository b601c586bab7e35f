// libFuzzer target: the EXIF orientation parser, which walks JPEG segments and a TIFF structure by hand.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "chute/decode/exif.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int orientation = chute::jpeg_exif_orientation(std::span<const uint8_t>(data, size));
  if (orientation < 1 || orientation > 8) std::abort();
  return 0;
}
