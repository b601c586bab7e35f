// Helpers shared by the C++ tests: synthetic images, a reference JPEG encoder and decoder built directly
// on libjpeg (independent of JpegDecoder), temporary directories and an in-memory Source.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "chute/io/source.h"

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

// A ustar member (header, data padded to 512 bytes) appended to `tar`; `type` '0' a file, '1' a hard link,
// '2' a symbolic link (to `link`), 'x' a pax header...
void add_tar_member(std::vector<uint8_t>& tar, const std::string& name, const std::string& data, char type = '0',
                    const std::string& link = "");
// The two zero blocks that end a tar.
void end_tar(std::vector<uint8_t>& tar);

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

// A source whose reads fail on chosen indices, the way a failing disk or network mount fails: read()
// returns kIoError with strerror(EIO) for those indices and delegates every other call. Counts reads.
class FailingSource final : public Source {
 public:
  FailingSource(std::shared_ptr<const Source> inner, std::set<int64_t> failing)
      : inner_(std::move(inner)), failing_(std::move(failing)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t label(int64_t i) const override { return inner_->label(i); }
  std::string name(int64_t i) const override { return inner_->name(i); }
  Status read(int64_t i, std::vector<uint8_t>& out) const override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    if (failing_.count(i)) return io_error(std::string("read failed: ") + std::strerror(EIO));
    return inner_->read(i, out);
  }
  int64_t reads() const { return reads_.load(); }

 private:
  std::shared_ptr<const Source> inner_;
  std::set<int64_t> failing_;
  mutable std::atomic<int64_t> reads_{0};
};

}  // namespace chute::testing
