// Resampling: PIL's separable, antialiased bilinear resize (Pillow's libImaging/Resample.c), reproduced
// operation for operation so that outputs match PIL's Image.resize(..., BILINEAR), which is what
// torchvision runs on PIL images.
//
// When shrinking, the triangle filter's support grows with the scale factor (antialiasing). Weights are
// normalised per output pixel, then quantised to 22-bit fixed point; a horizontal pass on rounded uint8
// output is followed by a vertical pass, each skipped when its axis keeps its size, exactly as PIL does.
// Thread-safety: AxisCoeffs is immutable once built; resample() uses only caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chute {

// Filter taps for one axis: for output i, inputs [first[i], first[i] + count[i]) with weights
// weights[i * taps ...]. Built for a resize from `in_size` to `out_size`, then optionally narrowed to a
// sub-range of outputs (a crop after the resize), so only needed outputs are computed.
struct AxisCoeffs {
  int in_size = 0;
  int out_size = 0;   // number of outputs kept
  int taps = 0;       // stride of `weights`
  bool identity = false;  // same size, no resampling: PIL skips this pass
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // fixed point, kPrecisionBits

  static constexpr int kPrecisionBits = 32 - 8 - 2;

  // Coefficients for resizing in_size -> resized, keeping outputs [keep_first, keep_first + keep_count).
  static AxisCoeffs bilinear(int in_size, int resized, int keep_first, int keep_count);
  // Lowest input used and one past the highest, over the kept outputs.
  int input_begin() const;
  int input_end() const;
  // Shifts the input indices so that input `offset` becomes 0 (the decoded window starts there).
  void rebase(int offset);
};

// Scratch space for resample(), reused across images by one thread.
struct ResampleScratch {
  std::vector<uint8_t> horizontal;  // output of the horizontal pass
  std::vector<int32_t> accumulator;  // one output row of the vertical pass
};

// Resizes an interleaved RGB uint8 image (`in`, rows `in_pitch` bytes apart) to `out` (RGB, tightly
// packed rows of xs.out_size pixels). `xs` and `ys` must have been rebased to the input's origin.
void resample_rgb(const uint8_t* in, size_t in_pitch, const AxisCoeffs& xs, const AxisCoeffs& ys,
                  uint8_t* out, ResampleScratch& scratch);

}  // namespace chute
