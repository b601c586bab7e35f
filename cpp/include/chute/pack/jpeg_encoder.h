// JpegEncoder: RGB uint8 pixels to a baseline JPEG with libjpeg-turbo's compressor (the library the
// decoder links), for `chute pack --max-side/--quality`, which re-encodes the images it resizes.
//
// Quality is libjpeg's (jpeg_set_quality, the scale PIL's `quality=` uses); chroma subsampling 4:2:0 or
// 4:4:4; Huffman tables optimised per image (smaller files, the same pixels). An EXIF orientation other
// than 1 is written as a minimal APP1 Exif segment holding only that tag, so that the record displays
// as its source did (apply_exif_orientation).
// Thread-safety: one encoder per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "chute/base/status.h"

namespace chute {

enum class ChromaSubsampling { k420, k444 };

class JpegEncoder {
 public:
  JpegEncoder();
  ~JpegEncoder();
  JpegEncoder(const JpegEncoder&) = delete;
  JpegEncoder& operator=(const JpegEncoder&) = delete;

  // Encodes `width` x `height` RGB pixels (rows `pitch` bytes apart) into `out`. quality in [1, 100].
  Status encode(const uint8_t* pixels, size_t pitch, int width, int height, int quality, ChromaSubsampling subsampling,
                int orientation, std::vector<uint8_t>& out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace chute
