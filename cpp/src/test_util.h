// Helpers shared by the C++ tests: synthetic images, a reference JPEG encoder and decoder built directly
// on libjpeg (independent of JpegDecoder), temporary directories and an in-memory Source.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "chute/source.h"

namespace chute::testing {

// A deterministic RGB image with smooth gradients, edges and noise (not trivially compressible).
std::vector<uint8_t> synthetic_rgb(int width, int height, uint32_t seed);

struct EncodeOptions {
  int quality = 92;
  int h_samp = 1, v_samp = 1;  // luma sampling factors: 1x1 is 4:4:4, 2x1 4:2:2, 2x2 4:2:0
  bool grayscale = false;
  bool progressive = false;
};
// Encodes interleaved RGB (or, with grayscale, takes the first channel of each pixel).
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int width, int height, EncodeOptions opts = {});
// Encodes interleaved CMYK (4 bytes per pixel, written as given) as a CMYK or YCCK JPEG, with the Adobe
// marker libjpeg writes for both.
std::vector<uint8_t> encode_jpeg_cmyk(const std::vector<uint8_t>& cmyk, int width, int height, bool ycck);
// Full decode with plain libjpeg settings (RGB output, ISLOW IDCT), as the reference.
std::vector<uint8_t> reference_decode(const std::vector<uint8_t>& jpeg, int* width, int* height);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& relative, const std::vector<uint8_t>& bytes) const;

 private:
  std::filesystem::path path_;
};

// Samples held in memory; label = index % classes.
class MemorySource final : public Source {
 public:
  explicit MemorySource(std::vector<std::vector<uint8_t>> items, int classes = 10)
      : items_(std::move(items)), classes_(classes) {}
  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  int64_t label(int64_t i) const override { return i % classes_; }
  std::string name(int64_t i) const override { return "mem://" + std::to_string(i); }
  Status read(int64_t i, std::vector<uint8_t>& out) const override {
    out = items_[i];
    return Status::ok();
  }

 private:
  std::vector<std::vector<uint8_t>> items_;
  int classes_;
};

}  // namespace chute::testing
