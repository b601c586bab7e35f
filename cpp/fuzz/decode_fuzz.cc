// libFuzzer target: the image decoder entry point (format detection, JPEG, PNG and WebP headers, window
// decode with and without the scaled IDCT), as the loader calls it, and the whole-file check that pack
// and `inspect --verify` run (control bit 6). The first input byte picks the window and reduction; the
// rest is the file. Build: -DCHUTE_BUILD_FUZZERS=ON with clang (cpp/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "chute/decode/image_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t control = data[0];
  const std::span<const uint8_t> file(data + 1, size - 1);
  static chute::ImageDecoder decoder(/*max_pixels=*/1 << 22);  // one per thread, reused like a worker's
  static std::vector<uint8_t> buffer;
  if (control >> 6 & 1) {
    static std::vector<uint8_t> scratch;
    (void)decoder.check(file, chute::ImageCheck::kFull, scratch);
  }
  auto info = decoder.read_info(file);
  if (!info.is_ok()) return 0;
  const int reduction = chute::ImageDecoder::max_reduction(file) > 1 ? 1 << (control & 3) : 1;
  const int w = (info->width + reduction - 1) / reduction, h = (info->height + reduction - 1) / reduction;
  if (w <= 0 || h <= 0) return 0;
  // A window from the control byte: whole image, or a corner-anchored part of it.
  const int x = (control >> 2 & 1) ? w / 3 : 0, y = (control >> 3 & 1) ? h / 3 : 0;
  const int ww = (control >> 4 & 1) ? (w - x + 1) / 2 : w - x, wh = (control >> 5 & 1) ? (h - y + 1) / 2 : h - y;
  auto view = decoder.decode(file, {x, y, ww, wh}, buffer, /*padding=*/4, reduction);
  if (view.is_ok()) {
    // Touch every decoded byte so ASan sees any read past the buffer.
    volatile uint8_t sink = 0;
    for (int r = 0; r < wh; ++r)
      for (int c = 0; c < ww * 3; ++c) sink = sink ^ view->pixels[r * view->pitch + c];
  }
  return 0;
}
