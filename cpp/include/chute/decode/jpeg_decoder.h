// JpegDecoder: libjpeg-turbo decoding of one image, or one window of it, into RGB uint8.
//
// The window is decoded, not cropped afterwards: columns outside it are skipped with jpeg_crop_scanline,
// rows above it with jpeg_skip_scanlines, and decoding stops after its last row. The pixels are exactly
// those of a full decode (tested in jpeg_decoder_test.cc).
//
// CMYK and YCCK JPEGs are converted to RGB the way Pillow does (inverted CMYK, then cmyk2rgb).
//
// libjpeg's warnings are split in two. Those that mean lost data (a truncated file, a corrupt entropy
// segment) are errors, as they are in PIL; benign ones (extraneous bytes before a marker) are counted.
// A truncated file is accepted only on request (set_accept_truncation, PIL's LOAD_TRUNCATED_IMAGES).
// Thread-safety: one decoder per thread; it keeps its libjpeg state between images.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "chute/base/status.h"
#include "chute/decode/image.h"

namespace chute {

class JpegDecoder {
 public:
  explicit JpegDecoder(int64_t max_pixels = kDefaultMaxPixels);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // True when the bytes start with the JPEG SOI marker.
  static bool is_jpeg(std::span<const uint8_t> data);

  // Reads the header only: size and colour model.
  Result<ImageInfo> read_info(std::span<const uint8_t> data);

  // Decodes `window` of the image as RGB into `buffer` (resized as needed, and readable for `padding`
  // bytes past the last row), where libjpeg writes its rows without a further copy. The window's pixel
  // (x, y) is at view.pixels + y * view.pitch + 3 * x. Grayscale is expanded to RGB. `window` must lie
  // inside the image.
  using View = ImageView;
  // With `reduction` 2, 4 or 8, libjpeg's scaled IDCT decodes the image that many times smaller (sizes
  // rounded up) and `window` is in the reduced image's pixels.
  Result<View> decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer, size_t padding = 0,
                      int reduction = 1);

  // Benign warnings seen since construction (e.g. "extraneous bytes before marker").
  int64_t benign_warnings() const;

  // Like PIL with ImageFile.LOAD_TRUNCATED_IMAGES = True (off by default, as in PIL): a file whose data
  // ends early decodes as PIL decodes it. The decoder gets one end-of-image marker after the data, as
  // Pillow feeds it, so the part not in the file is libjpeg's gray fill; where the decoder would still
  // need data (a progressive file cut inside a marker between scans) or fails after the header, the rows
  // not decoded are black, as PIL leaves them; warnings do not fail. A file cut before the end of its first
  // scan header still fails, as in PIL.
  void set_accept_truncation(bool accept);

 private:
  struct State;
  std::unique_ptr<State> state_;
  int64_t max_pixels_;
};

}  // namespace chute
