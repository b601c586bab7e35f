// Resampling: PIL's separable, antialiased bilinear resize (Pillow's libImaging/Resample.c), reproduced
// operation for operation so that outputs match PIL's Image.resize(..., BILINEAR), which is what
// torchvision runs on PIL images.
//
// When shrinking, the triangle filter's support grows with the scale factor (antialiasing). Weights are
// normalised per output pixel, then quantised to 22-bit fixed point; one pass rounds to uint8 before the
// other runs, each skipped when its axis keeps its size, exactly as PIL does. Which pass runs first
// depends on the Pillow release being followed (ResamplePassOrder): the rounding in between makes the
// order visible, by one level on some pixels.
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
  int out_size = 0;       // number of outputs kept
  int taps = 0;           // stride of `weights`
  bool identity = false;  // same size, no resampling: PIL skips this pass
  // Input size minus resized size along this axis, as Pillow compares them to order its passes: the
  // whole resize (before any crop of its output), in the image PIL resizes (after any crop before it).
  int shrink = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // fixed point, kPrecisionBits
  // The same taps laid out by tap then output (outputs padded to a multiple of 16, zero weights), with the
  // byte offset of each tap's RGB pixel clamped into the input: what the SIMD kernels read.
  int padded_out = 0;
  std::vector<int32_t> weights_by_tap;
  std::vector<int32_t> offsets_by_tap;
  std::vector<int> group_taps;  // per group of 8 outputs, the most taps any of them uses
  // For the AVX-512 kernel, per group of 16 outputs: the byte offset of its first input pixel, the bytes
  // its taps span, and its most taps; and per output, its first pixel's byte offset from its group's.
  // span16_fits: every group's span fits the 128 bytes the kernel holds in two registers.
  std::vector<int32_t> group16_begin;
  std::vector<int32_t> group16_bytes;
  std::vector<int> group16_taps;
  std::vector<int32_t> offsets16;
  bool span16_fits = false;

  static constexpr int kPrecisionBits = 32 - 8 - 2;

  // Coefficients for resizing in_size -> resized, keeping outputs [keep_first, keep_first + keep_count).
  static AxisCoeffs bilinear(int in_size, int resized, int keep_first, int keep_count);
  // The same for the box [box_begin, box_end) of an input of in_size samples, resized to `resized`
  // (Pillow's resize with a box): taps may reach outside the box, up to the input's edges.
  static AxisCoeffs bilinear_box(int in_size, double box_begin, double box_end, int resized, int keep_first,
                                 int keep_count);
  // Lowest input used and one past the highest, over the kept outputs.
  int input_begin() const;
  int input_end() const;
  // Shifts the input indices so that input `offset` becomes 0 and the input ends at input_end(): the
  // decoded window.
  void rebase(int offset);

 private:
  void build_tap_tables();
};

// Scratch space for resample_rgb(), reused across images by one thread.
struct ResampleScratch {
  std::vector<uint8_t> between_passes;  // output of the first pass, rounded to uint8
};

// Which of the two passes runs first, which decides how the intermediate rounding falls.
//   kHorizontalFirst: always rows first, then columns (Pillow up to 12.x).
//   kPillow13: columns first when the height loses more than twice as many pixels as the width
//     (ysize_in - ysize_out > 0 and > 2 * (xsize_in - xsize_out)), else rows first: Pillow 13.0 and later
//     (python-pillow/Pillow#9549, Resample.c's `horizontal_first`).
// Process-wide, since it follows the one Pillow installed (chute's Python layer sets it at import).
enum class ResamplePassOrder { kHorizontalFirst = 0, kPillow13 = 1 };
ResamplePassOrder resample_pass_order();
void set_resample_pass_order(ResamplePassOrder order);
// Whether resample_rgb runs the vertical pass first for these coefficients under the current order.
bool resample_vertical_first(const AxisCoeffs& xs, const AxisCoeffs& ys);

// Bytes past the end of the input that resample_rgb may read (and ignore).
inline constexpr size_t kResampleInputPadding = 4;

// Resizes an interleaved RGB uint8 image (`in`, rows `in_pitch` bytes apart) to `out` (RGB, tightly
// packed rows of xs.out_size pixels). `xs` and `ys` must have been rebased to the input's origin, and
// the input readable for kResampleInputPadding bytes past its last pixel. The result does not depend on
// which kernel (AVX2 or portable) runs: both compute Pillow's integer arithmetic exactly.
void resample_rgb(const uint8_t* in, size_t in_pitch, const AxisCoeffs& xs, const AxisCoeffs& ys, uint8_t* out,
                  ResampleScratch& scratch);

// Which kernels resample_rgb uses: the best this CPU runs of "avx512" (AVX-512 F, BW and VBMI), "avx2"
// and "portable", unless use_resample_kernels() chose others. The horizontal pass falls back from avx512 to
// avx2 for an image whose 16 adjacent outputs span more than 42 input pixels (a shrink of more than ~2.5x).
const char* resample_kernels();
// Selects kernels by name ("avx512", "avx2", "portable"; "" for the best available), for tests and
// benchmarks that compare them. Returns false, changing nothing, when this CPU cannot run them.
bool use_resample_kernels(const char* name);

}  // namespace chute
