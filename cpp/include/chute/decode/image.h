// Types shared by the image decoders (JpegDecoder, PngDecoder): what a header says, which rectangle to
// decode, and where the decoded RGB pixels are.
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chute {

struct ImageInfo {
  int width = 0;
  int height = 0;
  // Channels before conversion to RGB. JPEG: 1 grayscale, 3 YCbCr/RGB, 4 CMYK/YCCK. PNG: 1 gray, 2 gray +
  // alpha, 3 RGB, 4 RGBA; palette images 3, or 4 with a tRNS chunk.
  int components = 0;
  bool progressive = false;  // JPEG progressive, PNG Adam7-interlaced
};

// Any rectangle of an image, in pixels.
struct Window {
  int x = 0, y = 0, width = 0, height = 0;
};

// Decoded RGB uint8 pixels of a window: the window's pixel (x, y) is at pixels + y * pitch + 3 * x.
struct ImageView {
  const uint8_t* pixels = nullptr;
  size_t pitch = 0;
};

// Decompression-bomb guard: images with more pixels than this are refused (PIL's default limit is 89 MP
// for a warning and 179 MP for an error).
inline constexpr int64_t kDefaultMaxPixels = 200'000'000;

}  // namespace chute
