// Raw image records: uint8 RGB pixels (HWC, rows packed) stored as they are or compressed with zstd, so
// that a packed dataset can hold images that the loader reads with no decode (`chute pack --raw`).
//
// A raw payload is self-describing, like a JPEG or PNG file: a 32-byte header, then the pixels.
//
//   offset size field
//   0      8    magic "CHUTEPIX"
//   8      4    width (> 0)
//   12     4    height (> 0)
//   16     1    channels = 3 (RGB)
//   17     1    compression: 0 none, 1 zstd (one zstd frame, its content size recorded)
//   18     1    EXIF orientation (1..8) of the image these pixels came from; 1 when none
//   19     5    reserved, 0
//   24     8    pixel bytes: width * height * 3
//   32     ...  pixels (compression 0: exactly `pixel bytes`; 1: one zstd frame of that content size)
//
// ImageDecoder recognises it by its magic, so a pack may mix raw and encoded records.
// Thread-safety: RawDecoder is one per thread (it holds a zstd context); the functions are pure.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "chute/base/status.h"
#include "chute/decode/image.h"

namespace chute {

inline constexpr char kRawMagic[8] = {'C', 'H', 'U', 'T', 'E', 'P', 'I', 'X'};
inline constexpr size_t kRawHeaderSize = 32;

enum class RawCompression : uint8_t { kNone = 0, kZstd = 1 };

// The zstd level raw records are written at: -1, zstd's fastest level that still entropy-codes little.
// Raw records exist to skip a decode, so decompression speed comes first. On the bench's photos at 256 px
// (noisy textures; docs/STORE_LESS.md), level 3 stored 80% of the pixel bytes but decompressed at ~450
// MB/s (0.33 ms an image, as long as decoding the 256-px JPEG), level -1 stored 93% at ~1.3 GB/s (0.11
// ms), uncompressed is a copy (0.02 ms).
inline constexpr int kRawZstdLevel = -1;

// Encodes `width` x `height` RGB pixels (rows `pitch` bytes apart) as a raw payload into `out`.
Status encode_raw_image(const uint8_t* pixels, size_t pitch, int width, int height, RawCompression compression,
                        int orientation, std::vector<uint8_t>& out);

class RawDecoder {
 public:
  explicit RawDecoder(int64_t max_pixels = kDefaultMaxPixels);
  ~RawDecoder();
  RawDecoder(const RawDecoder&) = delete;
  RawDecoder& operator=(const RawDecoder&) = delete;

  static bool is_raw(std::span<const uint8_t> data);
  // Checks the header: magic, sizes, the pixel byte count against width x height x 3, the stored (or
  // zstd frame's content) size against it, and the pixel cap.
  Result<ImageInfo> read_info(std::span<const uint8_t> data);
  // The EXIF orientation recorded in the header (1 when the header is unreadable).
  static int orientation(std::span<const uint8_t> data);
  // The pixels of `window` (inside the image): rows [0, window bottom) are decompressed into `buffer`
  // (readable for `padding` bytes past them), and the view points at the window within them. A zstd
  // frame that fails, or that ends before or runs past width x height x 3 bytes, is kCorruptData.
  Result<ImageView> decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer,
                           size_t padding = 0);

 private:
  struct State;
  std::unique_ptr<State> state_;
  int64_t max_pixels_;
};

}  // namespace chute
