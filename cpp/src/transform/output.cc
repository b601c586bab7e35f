#include "chute/transform/output.h"

#include <string>
#include <utility>

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "transform/detail/output_kernels.h"

namespace chute {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
      return 1;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
  }
  return 0;
}

namespace {
constexpr std::pair<DType, const char*> kDTypeNames[] = {{DType::kUInt8, "uint8"},
                                                         {DType::kFloat32, "float32"},
                                                         {DType::kFloat16, "float16"},
                                                         {DType::kBFloat16, "bfloat16"}};
}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == dtype) return name;
  return "?";
}

Result<DType> parse_dtype(std::string_view name) {
  for (const auto& [d, n] : kDTypeNames)
    if (name == n) return d;
  return invalid_argument("dtype must be one of uint8, float32, float16, bfloat16, got '" + std::string(name) + "'");
}

namespace {

uint16_t to_bfloat16_bits(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // round to nearest even
}

// IEEE half from float, rounding to nearest even: the branch-free method of the FP16 library, which
// torch's c10 uses too (so the bits match tensor.to(torch.float16)). Portable: no _Float16 needed.
uint16_t to_float16_bits(float f) {
  const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : exp_bits + mantissa_bits));
}

}  // namespace

Result<OutputWriter> OutputWriter::create(int height, int width, OutputFormat format,
                                          const std::optional<Normalize>& normalize) {
  if (format.dtype == DType::kUInt8 && normalize)
    return invalid_argument("Normalize needs a floating-point dtype (e.g. torch.float32), not uint8");
  if (height <= 0 || width <= 0) return invalid_argument("output size must be positive");
  size_t bytes = 0;  // a sample's bytes must fit a size_t, or its buffer would be smaller than what is written
  if (__builtin_mul_overflow(static_cast<size_t>(height), static_cast<size_t>(width), &bytes) ||
      __builtin_mul_overflow(bytes, 3 * dtype_size(format.dtype), &bytes))
    return invalid_argument("an output image of " + std::to_string(height) + "x" + std::to_string(width) +
                            " pixels is too large to address (over 2**64 bytes): choose a smaller output size");
  OutputWriter w;
  w.height_ = height;
  w.width_ = width;
  w.format_ = format;
  for (int c = 0; c < 3; ++c) {
    const float mean = normalize ? normalize->mean[c] : 0.f;
    const float std = normalize ? normalize->std[c] : 1.f;
    for (int v = 0; v < 256; ++v) {
      const float value = (static_cast<float>(v) / 255.f - mean) / std;
      w.lut_f32_[c][v] = value;
      w.lut_16_[c][v] = format.dtype == DType::kBFloat16 ? to_bfloat16_bits(value) : to_float16_bits(value);
    }
  }
  return w;
}

namespace {

bool has_avx512_vbmi() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
  return has;
}

// One templated loop per (dtype, layout): the compiler vectorises the straight cases.
// T is the stored type: uint8_t (pixels as they are), float, or uint16_t (float16/bfloat16 bits). The
// float and 16-bit kinds read their value from `lut`.
template <typename T, Layout L>
void write_pixels(const uint8_t* rgb, int h, int w, bool flip, const std::array<std::array<T, 256>, 3>* lut, T* dst) {
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
          v = (*lut)[c][px[c]];
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
  const bool nchw = format_.layout == Layout::kNCHW;
  if (nchw && has_avx512_vbmi()) {  // the commonest writes, vectorised; the same values (output_avx512.cc)
    if (format_.dtype == DType::kUInt8)
      return detail::write_planes_u8_avx512(rgb, height_, width_, flip, static_cast<uint8_t*>(dst));
    if (format_.dtype == DType::kFloat32)
      return detail::write_planes_f32_avx512(rgb, height_, width_, flip, lut_f32_[0].data(), static_cast<float*>(dst));
  }
  switch (format_.dtype) {
    case DType::kUInt8: {
      using Lut = const std::array<std::array<uint8_t, 256>, 3>*;
      auto* out = static_cast<uint8_t*>(dst);
      nchw ? write_pixels<uint8_t, Layout::kNCHW>(rgb, height_, width_, flip, Lut{}, out)
           : write_pixels<uint8_t, Layout::kNHWC>(rgb, height_, width_, flip, Lut{}, out);
      break;
    }
    case DType::kFloat32: {
      auto* out = static_cast<float*>(dst);
      nchw ? write_pixels<float, Layout::kNCHW>(rgb, height_, width_, flip, &lut_f32_, out)
           : write_pixels<float, Layout::kNHWC>(rgb, height_, width_, flip, &lut_f32_, out);
      break;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      auto* out = static_cast<uint16_t*>(dst);
      nchw ? write_pixels<uint16_t, Layout::kNCHW>(rgb, height_, width_, flip, &lut_16_, out)
           : write_pixels<uint16_t, Layout::kNHWC>(rgb, height_, width_, flip, &lut_16_, out);
      break;
    }
  }
}

namespace {

// `count` copies of one value in the output's dtype, `stride` elements apart, from element `i` of `out`.
void store(DType dtype, void* out, size_t i, size_t count, size_t stride, float v) {
  const auto fill = [&](auto* p, auto value) {
    for (size_t k = 0; k < count; ++k) p[i + k * stride] = value;
  };
  switch (dtype) {
    case DType::kUInt8:
      return fill(static_cast<uint8_t*>(out), static_cast<uint8_t>(v <= 0.0f ? 0.0f : v >= 255.0f ? 255.0f : v));
    case DType::kFloat32:
      return fill(static_cast<float*>(out), v);
    case DType::kFloat16:
      return fill(static_cast<uint16_t*>(out), to_float16_bits(v));
    case DType::kBFloat16:
      return fill(static_cast<uint16_t*>(out), to_bfloat16_bits(v));
  }
}

}  // namespace

void OutputWriter::erase(void* dst, const ErasingDraw& draw, ErasingValues& values, const Normalize* normalize) const {
  const size_t plane = static_cast<size_t>(height_) * width_;
  const bool nchw = format_.layout == Layout::kNCHW;
  const size_t stride = nchw ? 1 : 3;  // between an element and the next to its right
  for (int c = 0; c < 3; ++c) {
    for (int y = draw.top; y < draw.top + draw.height; ++y) {
      const size_t first = nchw ? c * plane + static_cast<size_t>(y) * width_ + draw.left
                                : (static_cast<size_t>(y) * width_ + draw.left) * 3 + c;
      // A constant fills the row at once; 'random' draws each element (channel-major, as torch's normal_).
      const size_t run = values.random() ? 1 : static_cast<size_t>(draw.width);
      for (size_t x = 0; x < static_cast<size_t>(draw.width); x += run) {
        float v = values.next(c);
        if (normalize) v = (v - normalize->mean[c]) / normalize->std[c];
        store(format_.dtype, dst, first + x * stride, run, stride, v);
      }
    }
  }
}

}  // namespace chute
