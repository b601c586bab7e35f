// Output: the last step of a sample, writing its resized RGB pixels into its slot of a batch buffer in
// the requested dtype and layout, with the flip and normalisation folded into the same pass.
// Thread-safety: OutputWriter is immutable after construction; write() may run on many threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "chute/transform/transforms.h"

namespace chute {

enum class DType { kUInt8, kFloat32, kFloat16, kBFloat16 };
enum class Layout { kNCHW, kNHWC };

size_t dtype_size(DType dtype);
// "uint8", "float32", "float16", "bfloat16" (torch's names), and back.
const char* dtype_name(DType dtype);
Result<DType> parse_dtype(std::string_view name);

struct OutputFormat {
  DType dtype = DType::kUInt8;
  Layout layout = Layout::kNCHW;
};

class OutputWriter {
 public:
  // Float outputs are scaled to [0, 1] (torchvision's ToTensor) and then normalised if `normalize` is
  // set; uint8 outputs keep the pixels and refuse normalisation.
  static Result<OutputWriter> create(int height, int width, OutputFormat format,
                                     const std::optional<Normalize>& normalize);

  size_t sample_bytes() const { return static_cast<size_t>(height_) * width_ * 3 * dtype_size(format_.dtype); }

  // `rgb` holds height x width interleaved RGB pixels; `dst` is the sample's slot.
  void write(const uint8_t* rgb, bool flip, void* dst) const;

  // RandomErasing on the written sample: overwrites the draw's rectangle with `values` (channel-major),
  // normalised first by `normalize` when given ((v - mean) / std in float32: an erasing before Normalize),
  // in the output's dtype (float16/bfloat16 rounded to nearest even; uint8 levels truncated and clamped to
  // [0, 255], as torch casts in-range floats).
  void erase(void* dst, const ErasingDraw& draw, ErasingValues& values, const Normalize* normalize) const;

 private:
  int height_ = 0, width_ = 0;
  OutputFormat format_;
  // Per channel, the value of each uint8 level, computed as torchvision does, (float(v) / 255 - mean) / std
  // in float32, then rounded to nearest-even for float16 and bfloat16 (as torch's .to() does). The 16-bit
  // tables hold the bit patterns.
  std::array<std::array<float, 256>, 3> lut_f32_{};
  std::array<std::array<uint16_t, 256>, 3> lut_16_{};
};

}  // namespace chute
