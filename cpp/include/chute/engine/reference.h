// Reference measurements that benchmarks compare against, kept in the core so that they run the same
// libjpeg-turbo build and the same sources as the loader does.
// Thread-safety: each call is independent; decode_rate() runs on the calling thread, read_rate() on threads
// of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "chute/decode/jpeg_decoder.h"
#include "chute/io/source.h"
#include "chute/transform/transforms.h"

namespace chute {

// What a reference decode keeps of each image: the whole image (neither set); its RandomResizedCrop box,
// drawn as the loader draws it (a new one each pass): crop-on-decode alone; or the window `pipeline`
// plans for it (e.g. Resize + CenterCrop): the loader's own decode, without resampling.
struct ReferenceWindow {
  std::optional<RandomResizedCrop> crop;
  std::optional<Pipeline> pipeline;
};

// One step of decode_rate(): decodes what `keep` keeps of `file`, as drawn for file `index` in pass `pass`
// (SampleRng(0, pass, index)), into `pixels`.
Status reference_decode(JpegDecoder& decoder, std::span<const uint8_t> file, const ReferenceWindow& keep, uint64_t pass,
                        uint64_t index, std::vector<uint8_t>& pixels);

// Images per second of one thread decoding JPEGs already in memory to RGB (libjpeg-turbo, the accurate
// integer IDCT, fancy upsampling: what PIL does), keeping what `keep` says. Repeats over `files` for at
// least `min_seconds`. Files that fail to decode are counted as failures, not images.

struct DecodeRate {
  double images_per_second = 0;
  int64_t images = 0;
  int64_t failures = 0;
};
DecodeRate decode_rate(const std::vector<std::vector<uint8_t>>& files, const ReferenceWindow& keep, double min_seconds);

// Every sample's bytes read once by `source` (no decode) on `threads` threads named "chute-read": the
// storage layer alone (`chute bench --source`'s "read:" rows, bench/cold_read.py). With `shuffle`, in the
// order a shuffled epoch reads them (the sample order of seed 0, epoch 0: order/sampler.h), else in index
// order. A sample whose read fails is counted, not an error. Runs with the threads the kernel gave (an
// error, naming the limits, only when it gave none).
struct ReadRate {
  double seconds = 0;
  int64_t bytes = 0;
  int64_t failures = 0;
};
Result<ReadRate> read_rate(const Source& source, int threads, bool shuffle);

}  // namespace chute
