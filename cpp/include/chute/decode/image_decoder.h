// ImageDecoder: one entry point for every supported format. It recognises the format from the bytes
// (magic numbers), never from the file name, so a PNG named .jpg decodes as a PNG, and names what it
// cannot decode (GIF, BMP, TIFF, ...). It decodes JPEG, PNG and still WebP, and reads the raw pixels of a
// packed dataset's raw records (raw_image.h) with no decode.
// Thread-safety: one decoder per thread, like the decoders it holds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "chute/base/status.h"
#include "chute/decode/image.h"
#include "chute/decode/jpeg_decoder.h"
#include "chute/decode/png_decoder.h"
#include "chute/decode/raw_image.h"
#include "chute/decode/webp_decoder.h"

namespace chute {

enum class ImageFormat { kJpeg, kPng, kWebp, kRaw, kUnknown };

// How much of a file is checked before it is trusted (ImageDecoder::check).
//   kNone    nothing
//   kHeader  a format chute decodes, a header that parses, at most max_pixels pixels: cheap, a few
//            hundred bytes read; it misses damage in the compressed pixel data
//   kFull    kHeader, then a decode of every pixel: finds damage anywhere in the file, at the cost of a
//            whole decode
enum class ImageCheck { kNone, kHeader, kFull };

// The format the bytes announce.
ImageFormat detect_format(std::span<const uint8_t> data);

class ImageDecoder {
 public:
  explicit ImageDecoder(int64_t max_pixels = kDefaultMaxPixels)
      : max_pixels_(max_pixels), jpeg_(max_pixels), png_(max_pixels), webp_(max_pixels), raw_(max_pixels) {}

  Result<ImageInfo> read_info(std::span<const uint8_t> data);
  // Like JpegDecoder::decode, for any supported format; `reduction` > 1 only for JPEG (max_reduction()).
  Result<ImageView> decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer,
                           size_t padding = 0, int reduction = 1);
  // The largest reduction the format can decode at: 8 for JPEG (scaled IDCT), 1 otherwise.
  static int max_reduction(std::span<const uint8_t> data);
  // The EXIF orientation (1..8) of a JPEG, or the one a raw record kept from its source; 1 otherwise.
  static int orientation(std::span<const uint8_t> data);
  int64_t benign_warnings() const { return jpeg_.benign_warnings() + png_.benign_warnings(); }
  // Whether the loader can decode the file, to `level` (see ImageCheck): the Status decode() would
  // return for it, with the same codes (kUnsupported, kCorruptData, kResourceExhausted over max_pixels).
  // `scratch` receives the pixels of a kFull check.
  Status check(std::span<const uint8_t> data, ImageCheck level, std::vector<uint8_t>& scratch);
  // Frees the scratch the decoders keep between images (after a large one).
  void release_scratch() { png_.release_scratch(); }
  // PIL's ImageFile.LOAD_TRUNCATED_IMAGES, for JPEG (JpegDecoder::set_accept_truncation).
  void set_accept_truncation(bool accept) { jpeg_.set_accept_truncation(accept); }

 private:
  int64_t max_pixels_;
  JpegDecoder jpeg_;
  PngDecoder png_;
  WebpDecoder webp_;
  RawDecoder raw_;
};

}  // namespace chute
