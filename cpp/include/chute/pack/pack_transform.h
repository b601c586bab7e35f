// What `chute pack` stores for each image when asked to store less (docs/STORE_LESS.md): the source's
// bytes as they are, or its pixels resized to a cap and encoded again as JPEG, or stored raw (raw_image.h).
//
// The resize is PIL's Image.resize(size, BILINEAR) exactly (resample.h: antialiased, Pillow's integer
// arithmetic), from a full decode that is PIL's too; the output size rounds as torchvision's Resize does:
//   max_shorter_side N: an image whose shorter side s exceeds N gets shorter side N and longer side
//     int(N * l / s) (torchvision Resize(N));
//   max_side N: an image whose longer side l exceeds N gets longer side N and shorter side int(N * s / l)
//     (torchvision Resize(..., max_size=N)'s rule), at least 1.
// Images within the cap are never enlarged.
// Thread-safety: StoreOptions is a value; one RecordTransformer per thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "chute/decode/image_decoder.h"
#include "chute/decode/raw_image.h"
#include "chute/io/packed_format.h"
#include "chute/pack/jpeg_encoder.h"
#include "chute/transform/resample.h"

namespace chute {

struct StoreOptions {
  int max_side = 0;          // 0: no cap
  int max_shorter_side = 0;  // 0: no cap; not together with max_side
  int quality = 90;          // JPEG quality of re-encoded images, [1, 100]
  ChromaSubsampling subsampling = ChromaSubsampling::k420;
  // An image that needs no resize (and is not stored raw) keeps its source bytes: no added loss. False:
  // every image is decoded and encoded again at `quality`.
  bool keep_original = true;
  bool raw = false;       // store every image as raw pixels
  int64_t raw_below = 0;  // store an image raw when its stored size has fewer pixels than this (0: never)
  RawCompression raw_compression = RawCompression::kZstd;

  // Whether any image may be stored otherwise than as its source bytes.
  bool active() const { return max_side > 0 || max_shorter_side > 0 || !keep_original || raw || raw_below > 0; }
  Status validate() const;
};

// The size an image of width x height is stored at under `o`'s cap (the rule above).
void capped_size(int width, int height, const StoreOptions& o, int* out_width, int* out_height);

// The record kind of source bytes stored unchanged (kUnknown for a format chute does not decode).
RecordKind original_kind(std::span<const uint8_t> data);

class RecordTransformer {
 public:
  explicit RecordTransformer(int64_t max_pixels = kDefaultMaxPixels) : decoder_(max_pixels) {}

  // Decides what to store for `source` (an image ImageDecoder reads) under `o`. Returns true with the
  // payload in `out` when the record is transformed, false when the source bytes are stored as they
  // are; either way `entry` gets the record's kind, stored width and height. Errors are the image's
  // (a decode that fails) with the decoder's codes.
  Result<bool> transform(std::span<const uint8_t> source, const StoreOptions& o, std::vector<uint8_t>& out,
                         IndexEntry* entry);

 private:
  ImageDecoder decoder_;
  JpegEncoder encoder_;
  std::vector<uint8_t> decoded_, resized_;
  ResampleScratch scratch_;
};

}  // namespace chute
