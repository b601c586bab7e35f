// The pixel stage's primitive operations: torchvision's functional image ops (affine, rotate, adjust_*,
// posterize, solarize, autocontrast, equalize, invert, rgb_to_grayscale, gaussian_blur) on one uint8 RGB
// image, after the resample and before the output writer. Each op has the arithmetic of one of
// torchvision's two implementations:
//   kPil     torchvision's functional_pil on a PIL image (what AutoAugment, RandAugment, TrivialAugmentWide,
//            ColorJitter, RandomRotation and RandomAffine use in the reference recipes): Pillow's own
//            integer and float steps (Image.transform, ImageEnhance, ImageOps), bit-exact.
//   kTensor  torchvision's functional_tensor on a uint8 tensor (what AugMix and GaussianBlur use, even on
//            PIL input): float32 blends, grid_sample, conv2d. Close, not bit-exact: torch's own kernels
//            sum in an order of their choosing (docs/AUGMENT.md states the measured tolerance per op).
// torchvision's two APIs compute some ops differently (TorchvisionApi): v2 has its own affine matrix
// arithmetic, and on tensors fused blends, its own sharpness, autocontrast, bilinear fill and blur kernel.
// Thread-safety: the functions are pure; a PixelScratch belongs to one thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "chute/base/status.h"

namespace chute {

enum class Interpolation : uint8_t { kNearest, kBilinear };
enum class PixelBackend : uint8_t { kPil, kTensor };
enum class TorchvisionApi : uint8_t { kV1, kV2 };             // torchvision.transforms, torchvision.transforms.v2
const char* interpolation_name(Interpolation interpolation);  // "nearest", "bilinear" (torchvision's values)
Result<Interpolation> parse_interpolation(std::string_view name);

// torchvision's `fill`: the colour of what a geometric op uncovers. None is black. The PIL path takes
// int(v) of each value (torchvision's _parse_fill); the tensor path the float, and with None it samples
// zeros instead of blending a fill (grid_sample's padding).
using Fill = std::optional<std::array<double, 3>>;

enum class PixelOpKind : uint8_t {
  kIdentity,
  kAffine,          // F.affine(angle, translate, scale, shear, center)
  kRotate,          // F.rotate(angle, center), expand=False
  kBrightness,      // F.adjust_brightness(factor)
  kContrast,        // F.adjust_contrast(factor)
  kSaturation,      // F.adjust_saturation(factor)
  kSharpness,       // F.adjust_sharpness(factor)
  kHue,             // F.adjust_hue(factor), factor in [-0.5, 0.5]
  kPosterize,       // F.posterize(bits)
  kSolarize,        // F.solarize(threshold)
  kAutoContrast,    // F.autocontrast
  kEqualize,        // F.equalize
  kInvert,          // F.invert
  kGrayscale,       // F.rgb_to_grayscale(num_output_channels=3)
  kGaussianBlur,    // F.gaussian_blur(kernel_size, sigma): always the tensor arithmetic, as torchvision
  kHorizontalFlip,  // F.hflip (a RandomHorizontalFlip that precedes other pixel ops)
};
const char* pixel_op_name(PixelOpKind kind);  // torchvision's functional name: "affine", "adjust_brightness", ...
Result<PixelOpKind> parse_pixel_op(std::string_view name);

// One call of a functional op with its arguments (the fields its kind reads).
struct PixelOp {
  PixelOpKind kind = PixelOpKind::kIdentity;
  PixelBackend backend = PixelBackend::kPil;
  TorchvisionApi api = TorchvisionApi::kV1;
  Interpolation interpolation = Interpolation::kNearest;  // kAffine, kRotate
  Fill fill;                                              // kAffine, kRotate
  // kAffine: angle (degrees, clockwise), translate (pixels), scale, shear (degrees, x and y). kRotate:
  // angle (degrees, counter-clockwise). Both: the centre in pixels from the top-left corner (none: the
  // image's centre).
  double angle = 0.0, translate_x = 0.0, translate_y = 0.0, scale = 1.0, shear_x = 0.0, shear_y = 0.0;
  std::optional<std::array<double, 2>> center;
  // kBrightness, kContrast, kSaturation, kSharpness, kHue: the factor; kSolarize: the threshold.
  double factor = 1.0;
  int bits = 8;                             // kPosterize, in [0, 8]
  int kernel_width = 1, kernel_height = 1;  // kGaussianBlur: odd and positive
  double sigma_x = 1.0, sigma_y = 1.0;      // kGaussianBlur: positive
};
// The argument ranges torchvision enforces (factors >= 0, hue in [-0.5, 0.5], bits in [0, 8], scale > 0,
// odd kernels, positive sigmas, a blur's reflection padding smaller than the width x height image);
// kInvalidArgument naming the op and argument.
Status check_pixel_op(const PixelOp& op, int width, int height);

// Buffers the ops reuse from sample to sample, so that no op allocates once they have grown.
struct PixelScratch {
  std::vector<uint8_t> spare;  // the other image of an op that cannot work in place, or a blend's degenerate
  std::vector<float> floats;   // float32 intermediates of the tensor path (the grid, the blur's rows)
  std::vector<float> floats2;  // the blur's kernels
};

// `pixels` holds width x height interleaved RGB pixels (rows width * 3 bytes apart); the op replaces them.
// An op that cannot work in place writes into scratch.spare and swaps it with `pixels`: both vectors keep
// their capacity.
void apply_pixel_op(const PixelOp& op, std::vector<uint8_t>& pixels, int width, int height, PixelScratch& scratch);

// torchvision's _get_inverse_affine_matrix (inverted=True): the output-to-input matrix {a, b, c, d, e, f}
// for an affine about `center` (pixels), in the double arithmetic and order of the API's Python original.
std::array<double, 6> inverse_affine_matrix(TorchvisionApi api, std::array<double, 2> center, double angle,
                                            double translate_x, double translate_y, double scale, double shear_x,
                                            double shear_y);

}  // namespace chute
