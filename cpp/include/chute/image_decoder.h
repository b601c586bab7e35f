// ImageDecoder: one entry point for every supported format. It recognises the format from the bytes
// (magic numbers), never from the file name, so a PNG named .jpg decodes as a PNG, and names what it
// cannot decode (GIF, WebP, BMP, TIFF, ...).
// Thread-safety: one decoder per thread, like the decoders it holds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "chute/image.h"
#include "chute/jpeg_decoder.h"
#include "chute/png_decoder.h"
#include "chute/status.h"

namespace chute {

enum class ImageFormat { kJpeg, kPng, kUnknown };

// The format the bytes announce.
ImageFormat detect_format(std::span<const uint8_t> data);

class ImageDecoder {
 public:
  explicit ImageDecoder(int64_t max_pixels = kDefaultMaxPixels) : jpeg_(max_pixels), png_(max_pixels) {}

  Result<ImageInfo> read_info(std::span<const uint8_t> data);
  // Like JpegDecoder::decode, for any supported format; `reduction` > 1 only for JPEG (max_reduction()).
  Result<ImageView> decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer,
                           size_t padding = 0, int reduction = 1);
  // The largest reduction the format can decode at: 8 for JPEG (scaled IDCT), 1 otherwise.
  static int max_reduction(std::span<const uint8_t> data);
  // The EXIF orientation (1..8) of a JPEG; 1 for other formats.
  static int orientation(std::span<const uint8_t> data);
  int64_t benign_warnings() const { return jpeg_.benign_warnings() + png_.benign_warnings(); }
  // Frees the scratch the decoders keep between images (after a large one).
  void release_scratch() { png_.release_scratch(); }

 private:
  JpegDecoder jpeg_;
  PngDecoder png_;
};

}  // namespace chute
