// SampleProcessor: one sample's whole path inside a worker thread: read its bytes, read the image
// header, plan the transforms, decode only the planned window, resample, augment (the pixel stage), and
// write the result into the sample's slot of a batch buffer (then RandomErasing on it).
// Thread-safety: one processor per thread; it owns that thread's decoder and scratch buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "chute/base/option_range.h"
#include "chute/decode/decode_budget.h"
#include "chute/decode/image_decoder.h"
#include "chute/engine/stats.h"
#include "chute/io/source.h"
#include "chute/transform/output.h"
#include "chute/transform/resample.h"
#include "chute/transform/transforms.h"

namespace chute {

enum class DecodeMode { kExact, kReduced };
inline constexpr double kDefaultReducingGap = 3.0;
const char* decode_mode_name(DecodeMode mode);  // "exact", "reduced"
Result<DecodeMode> parse_decode_mode(std::string_view name);

// How images are decoded, whatever the transforms.
struct DecodeOptions {
  int64_t max_pixels = kDefaultMaxPixels;  // decompression-bomb guard
  bool apply_exif_orientation = false;     // turn JPEGs upright by their EXIF tag, like PIL.ImageOps.exif_transpose
  // kExact decodes every pixel at full size: PIL's full decode + resize, bit for bit. kReduced lets a JPEG
  // decode 2, 4 or 8 times smaller (libjpeg's scaled IDCT) while the resize still shrinks the reduced
  // window by at least `reducing_gap` on both axes: Pillow's reducing_gap (Image.resize, thumbnail +
  // draft). Faster on large images; pixels then differ slightly from the exact ones (docs/DECODE.md).
  DecodeMode mode = DecodeMode::kExact;
  double reducing_gap = kDefaultReducingGap;  // kReduced only; at least 1.0, as in Pillow
  // Decode every pixel of every image, not only the window the transforms keep, so that damage anywhere
  // in a file fails its sample in every epoch, whatever the random crop. Costs a whole-image decode per
  // sample (crop-on-decode's savings are lost); the pixels delivered are the same.
  bool validate_full = false;
  // The largest file read whole; a larger one is the sample's error (kResourceExhausted), read never.
  uint64_t max_file_bytes = kDefaultMaxFileBytes;
  // Where a decode needing more than kUnchargedDecodeBytes of scratch asks for its memory first (shared by
  // a loader's workers; the Loader makes one from max_memory when none is given). None: not charged.
  std::shared_ptr<DecodeBudget> budget;
  // Decode JPEGs whose data ends early, the rest gray, as PIL does with ImageFile.LOAD_TRUNCATED_IMAGES.
  bool accept_truncated = false;

  static constexpr OptionRange kMaxPixels{"max_pixels", 1, kInt64Max};
  static constexpr OptionRange kMaxFileBytes{"max_file_bytes", 1, kUInt64Max};
  // Ok, or kInvalidArgument naming the first option out of range (the message Python shows as ValueError).
  Status validate() const;
  // reducing_gap must be finite and >= 1.0, as Pillow requires.
  static Status check_reducing_gap(double gap);
};

// The scratch memory a sample's decode and resample will use at most: the encoded file, the decoded
// window (a PNG decodes whole rows), an interlaced PNG's raw rows, a progressive JPEG's coefficients, the
// upright copy when EXIF turns the image, and the resampler's intermediate rows.
size_t decode_scratch_bytes(const ImageInfo& info, bool png, size_t file_bytes, int window_width, int window_height,
                            bool reoriented, int out_width);

class SampleProcessor {
 public:
  SampleProcessor(const Source& source, const Pipeline& pipeline, const OutputWriter& writer,
                  DecodeOptions decode = {});

  // Processes source sample `index`, its random draws keyed by (key.seed, key.epoch, index), into `dst`
  // (OutputWriter::sample_bytes() bytes). With `times`, adds the time spent in each stage (also when the sample fails).
  // An environment failure (out of descriptors or memory, std::bad_alloc included, or a transient I/O error) is retried
  // with backoff and then returned as kEnvironment (environment.h); nothing thrown escapes.
  Status process(int64_t index, EpochKey key, void* dst, StageTimes* times = nullptr);

  int64_t benign_warnings() const { return decoder_.benign_warnings(); }

 private:
  Status process_once(int64_t index, EpochKey key, void* dst, StageTimes* times);
  void release_scratch();                  // frees every buffer this processor keeps between samples
  void pad_zeros(const SamplePlan& plan);  // resized_ -> padded_

  const Source& source_;
  const Pipeline& pipeline_;
  const OutputWriter& writer_;
  DecodeOptions decode_;
  ImageDecoder decoder_;
  std::vector<uint8_t> bytes_;     // the encoded file
  std::vector<uint8_t> window_;    // the decoded window
  std::vector<uint8_t> oriented_;  // the decoded window turned upright (EXIF orientation)
  std::vector<uint8_t> resized_;   // the resampled output, RGB
  std::vector<uint8_t> padded_;    // the output with zero padding around it (CenterCrop larger than the image)
  ResampleScratch scratch_;
  AugmentDraws draws_;      // the sample's augmentation draws (pixel stage, erasing)
  AugmentScratch augment_;  // the pixel stage's buffers
};

}  // namespace chute
