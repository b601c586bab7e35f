// WebpDecoder: libwebp decoding of one still WebP image (lossy or lossless) into RGB uint8, with the pixel
// values of Pillow's `Image.open(f).convert("RGB")` (Pillow decodes WebP with libwebp too, and converts
// RGBA to RGB by dropping alpha, as MODE_RGB does here).
//
// WebP cannot decode a window exactly: libwebp's cropping changes the chroma upsampling at the crop's
// edges. So decode() decodes the whole image and returns a view of the window inside it; every verdict
// is that of the whole file.
//
// Errors: kUnsupported (not a WebP file, an animated WebP), kCorruptData (truncated or damaged bitstream),
// kResourceExhausted (more than max_pixels pixels, checked from the header before any allocation),
// kInvalidArgument (window outside the image).
// Thread-safety: one decoder per thread (it holds no state of its own; libwebp's decode is reentrant).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "chute/base/status.h"
#include "chute/decode/image.h"

namespace chute {

class WebpDecoder {
 public:
  explicit WebpDecoder(int64_t max_pixels = kDefaultMaxPixels) : max_pixels_(max_pixels) {}

  // True when the bytes start with a RIFF header of form WEBP.
  static bool is_webp(std::span<const uint8_t> data);

  // Reads the header only: size and channels (4 with alpha, else 3).
  Result<ImageInfo> read_info(std::span<const uint8_t> data);

  // Decodes the image as RGB into `buffer` (resized as needed, and readable for `padding` bytes past the
  // last row) and returns the view of `window`: its pixel (x, y) is at view.pixels + y * view.pitch + 3 * x.
  Result<ImageView> decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer,
                           size_t padding = 0);

 private:
  int64_t max_pixels_;
};

}  // namespace chute
