// PngDecoder: libpng decoding of one PNG, or one window of it, into RGB uint8, with the pixel values of
// Pillow's `Image.open(f).convert("RGB")`.
//
// Conversion to RGB (each rule checked against Pillow 13 by png_decoder_test.cc and test_png.py):
//   gray 1/2/4/8-bit     replicated; low depths scaled to 0..255 (1-bit 0/255, 2-bit x85, 4-bit x17)
//   gray 16-bit          Pillow's "I;16" -> RGB clips: values above 255 become 255 (no scaling)
//   gray+alpha, RGBA     alpha dropped, not composited
//   16-bit RGB/RGBA/GA   the most significant byte (truncation, not rounding)
//   palette (1..8-bit)   looked up in PLTE; tRNS ignored; indices past the palette's end are black
//   tRNS, gAMA, sRGB, iCCP, cHRM, sBIT, bKGD   ignored, as Pillow's conversion ignores them
//
// PNG rows cannot be skipped, so decode() inflates every row down to the window's last one and stops
// there; only the window's columns are converted. An interlaced (Adam7) image needs all seven passes, so
// its whole stream is read, but only the window's rows are kept.
//
// Verdicts do not depend on the window: before decoding, decode() walks the chunk list, which must be
// complete up to and including IEND, and checks every chunk's CRC (libpng then skips its own CRC checks).
// So a truncated file or a flipped bit anywhere in the file is an error whatever the window. A corrupt
// zlib stream is found as far as the window's rows reach (all of it when the window reaches the last
// row). This is stricter than Pillow, which ignores IDAT CRCs and a missing IEND.
//
// libpng never prints: its warnings and benign errors are counted (benign_warnings()); its errors become
// Status kCorruptData with libpng's message.
// Thread-safety: one decoder per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "chute/base/status.h"
#include "chute/decode/image.h"

namespace chute {

class PngDecoder {
 public:
  using View = ImageView;

  explicit PngDecoder(int64_t max_pixels = kDefaultMaxPixels);
  ~PngDecoder();
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;

  // True when the bytes start with the 8-byte PNG signature.
  static bool is_png(std::span<const uint8_t> data);

  // Reads the chunks before the image data only: size, channels (see ImageInfo) and interlacing.
  Result<ImageInfo> read_info(std::span<const uint8_t> data);

  // Decodes `window` of the image as RGB into `buffer` (resized as needed, and readable for `padding`
  // bytes past the last row). The window's pixel (x, y) is at view.pixels + y * view.pitch + 3 * x.
  // `window` must lie inside the image. Errors: kUnsupported (not a PNG), kCorruptData (truncated,
  // CRC, zlib or format errors), kResourceExhausted (more than max_pixels pixels), kInvalidArgument
  // (window outside the image).
  Result<View> decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer, size_t padding = 0);

  // libpng warnings and benign errors seen since construction (e.g. an invalid ancillary chunk).
  int64_t benign_warnings() const;
  // Frees the raw-row scratch kept between images (an interlaced image keeps its window's raw rows).
  void release_scratch();

 private:
  struct State;
  std::unique_ptr<State> state_;
  int64_t max_pixels_;
};

}  // namespace chute
