#include "chute/output.h"

#include <cstring>
#include <type_traits>

namespace chute {

size_t dtype_size(DType dtype) { return dtype == DType::kUInt8 ? 1 : 4; }

Result<OutputWriter> OutputWriter::create(int height, int width, OutputFormat format,
                                          const std::optional<Normalize>& normalize) {
  if (format.dtype == DType::kUInt8 && normalize)
    return invalid_argument("Normalize needs a floating-point dtype (e.g. torch.float32), not uint8");
  OutputWriter w;
  w.height_ = height;
  w.width_ = width;
  w.format_ = format;
  for (int c = 0; c < 3; ++c) {
    const float mean = normalize ? normalize->mean[c] : 0.f;
    const float std = normalize ? normalize->std[c] : 1.f;
    for (int v = 0; v < 256; ++v) w.lut_[c][v] = (static_cast<float>(v) / 255.f - mean) / std;
  }
  return w;
}

namespace {

// One templated loop per (dtype, layout): the compiler vectorises the straight cases.
template <typename T, Layout L>
void write_pixels(const uint8_t* rgb, int h, int w, bool flip, const std::array<std::array<float, 256>, 3>& lut,
                  T* dst) {
  const size_t plane = static_cast<size_t>(h) * w;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = rgb + static_cast<size_t>(y) * w * 3;
    for (int x = 0; x < w; ++x) {
      const uint8_t* px = row + static_cast<size_t>(flip ? w - 1 - x : x) * 3;
      for (int c = 0; c < 3; ++c) {
        T v;
        if constexpr (std::is_same_v<T, uint8_t>) {
          v = px[c];
        } else {
          v = lut[c][px[c]];
        }
        if constexpr (L == Layout::kNCHW) {
          dst[c * plane + static_cast<size_t>(y) * w + x] = v;
        } else {
          dst[(static_cast<size_t>(y) * w + x) * 3 + c] = v;
        }
      }
    }
  }
}

}  // namespace

void OutputWriter::write(const uint8_t* rgb, bool flip, void* dst) const {
  if (format_.dtype == DType::kUInt8 && format_.layout == Layout::kNHWC && !flip) {
    std::memcpy(dst, rgb, sample_bytes());
    return;
  }
  switch (format_.dtype) {
    case DType::kUInt8:
      if (format_.layout == Layout::kNCHW)
        write_pixels<uint8_t, Layout::kNCHW>(rgb, height_, width_, flip, lut_, static_cast<uint8_t*>(dst));
      else
        write_pixels<uint8_t, Layout::kNHWC>(rgb, height_, width_, flip, lut_, static_cast<uint8_t*>(dst));
      break;
    case DType::kFloat32:
      if (format_.layout == Layout::kNCHW)
        write_pixels<float, Layout::kNCHW>(rgb, height_, width_, flip, lut_, static_cast<float*>(dst));
      else
        write_pixels<float, Layout::kNHWC>(rgb, height_, width_, flip, lut_, static_cast<float*>(dst));
      break;
  }
}

}  // namespace chute
