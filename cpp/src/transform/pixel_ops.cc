#include "chute/transform/pixel_ops.h"

#include <cmath>
#include <string>
#include <utility>

#include "transform/detail/pil_ops.h"
#include "transform/detail/tensor_ops.h"

namespace chute {
namespace {

constexpr std::pair<Interpolation, const char*> kInterpolationNames[] = {{Interpolation::kNearest, "nearest"},
                                                                         {Interpolation::kBilinear, "bilinear"}};

constexpr std::pair<PixelOpKind, const char*> kOpNames[] = {
    {PixelOpKind::kIdentity, "identity"},
    {PixelOpKind::kAffine, "affine"},
    {PixelOpKind::kRotate, "rotate"},
    {PixelOpKind::kBrightness, "adjust_brightness"},
    {PixelOpKind::kContrast, "adjust_contrast"},
    {PixelOpKind::kSaturation, "adjust_saturation"},
    {PixelOpKind::kSharpness, "adjust_sharpness"},
    {PixelOpKind::kHue, "adjust_hue"},
    {PixelOpKind::kPosterize, "posterize"},
    {PixelOpKind::kSolarize, "solarize"},
    {PixelOpKind::kAutoContrast, "autocontrast"},
    {PixelOpKind::kEqualize, "equalize"},
    {PixelOpKind::kInvert, "invert"},
    {PixelOpKind::kGrayscale, "rgb_to_grayscale"},
    {PixelOpKind::kGaussianBlur, "gaussian_blur"},
    {PixelOpKind::kHorizontalFlip, "hflip"},
};

// math.radians: x * (pi / 180), one multiplication by CPython's constant.
inline double radians(double degrees) { return degrees * (M_PI / 180.0); }

// The centre torchvision's tensor path passes: pixels relative to the image centre (center_f), or 0.
std::array<double, 2> tensor_center(const PixelOp& op, int width, int height) {
  if (!op.center) return {0.0, 0.0};
  return {1.0 * ((*op.center)[0] - width * 0.5), 1.0 * ((*op.center)[1] - height * 0.5)};
}

}  // namespace

const char* interpolation_name(Interpolation interpolation) {
  for (const auto& [i, name] : kInterpolationNames)
    if (i == interpolation) return name;
  return "?";
}

Result<Interpolation> parse_interpolation(std::string_view name) {
  for (const auto& [i, n] : kInterpolationNames)
    if (name == n) return i;
  return invalid_argument("interpolation must be 'nearest' or 'bilinear', got '" + std::string(name) + "'");
}

const char* pixel_op_name(PixelOpKind kind) {
  for (const auto& [k, name] : kOpNames)
    if (k == kind) return name;
  return "?";
}

Result<PixelOpKind> parse_pixel_op(std::string_view name) {
  for (const auto& [k, n] : kOpNames)
    if (name == n) return k;
  return invalid_argument("unknown pixel op '" + std::string(name) + "'");
}

std::array<double, 6> inverse_affine_matrix(TorchvisionApi api, std::array<double, 2> center, double angle,
                                            double translate_x, double translate_y, double scale, double shear_x,
                                            double shear_y) {
  const double rot = radians(angle), sx = radians(shear_x), sy = radians(shear_y);
  const double cx = center[0], cy = center[1], tx = translate_x, ty = translate_y;
  if (api == TorchvisionApi::kV2) {  // v2/functional/_geometry.py: the same matrix, other roundings
    const double cos_sy = std::cos(sy), tan_sx = std::tan(sx), rot_minus_sy = rot - sy;
    const double cx_plus_tx = cx + tx, cy_plus_ty = cy + ty;
    const double a = std::cos(rot_minus_sy) / cos_sy;
    const double b = -(a * tan_sx + std::sin(rot));
    const double c = std::sin(rot_minus_sy) / cos_sy;
    const double d = std::cos(rot) - c * tan_sx;
    std::array<double, 6> m = {d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0};
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
    return m;
  }
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d / scale, -b / scale, 0.0 / scale, -c / scale, a / scale, 0.0 / scale};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

Status check_pixel_op(const PixelOp& op, int width, int height) {
  const std::string name = pixel_op_name(op.kind);
  const bool pil = op.backend == PixelBackend::kPil;
  switch (op.kind) {
    case PixelOpKind::kAffine:
      if (!(op.scale > 0.0)) return invalid_argument("affine: scale should be positive");
      break;
    case PixelOpKind::kBrightness:
    case PixelOpKind::kContrast:
    case PixelOpKind::kSaturation:
    case PixelOpKind::kSharpness:
      if (!(op.factor >= 0.0))
        return invalid_argument(name + ": factor (" + std::to_string(op.factor) + ") is not non-negative");
      break;
    case PixelOpKind::kHue:
      if (!(op.factor >= -0.5 && op.factor <= 0.5))
        return invalid_argument("adjust_hue: hue_factor (" + std::to_string(op.factor) + ") is not in [-0.5, 0.5]");
      if (!pil) return unsupported("adjust_hue: only the PIL arithmetic is implemented");
      break;
    case PixelOpKind::kPosterize:
      // Pillow's ImageOps.posterize refuses 0 bits; the tensor path clears every bit.
      if (op.bits < (pil ? 1 : 0) || op.bits > 8)
        return invalid_argument("posterize: bits must be in [" + std::string(pil ? "1" : "0") + ", 8], got " +
                                std::to_string(op.bits));
      break;
    case PixelOpKind::kGaussianBlur:
      if (op.kernel_width <= 0 || op.kernel_height <= 0 || op.kernel_width % 2 == 0 || op.kernel_height % 2 == 0)
        return invalid_argument("gaussian_blur: kernel size value should be an odd and positive number");
      if (!(op.sigma_x > 0.0 && op.sigma_y > 0.0))
        return invalid_argument("gaussian_blur: sigma should have positive values");
      if (op.kernel_width / 2 >= width || op.kernel_height / 2 >= height)
        return invalid_argument("gaussian_blur: kernel size " + std::to_string(op.kernel_width) + "x" +
                                std::to_string(op.kernel_height) + " needs reflection padding larger than the " +
                                std::to_string(width) + "x" + std::to_string(height) + " image");
      break;
    default:
      break;
  }
  return Status::ok();
}

void apply_pixel_op(const PixelOp& op, std::vector<uint8_t>& pixels, int width, int height, PixelScratch& scratch) {
  const size_t n = static_cast<size_t>(width) * height;
  uint8_t* rgb = pixels.data();
  const bool pil = op.backend == PixelBackend::kPil;
  const auto into_spare = [&](auto&& write) {  // ops that read the whole source while writing
    scratch.spare.resize(n * 3);
    write(scratch.spare.data());
    pixels.swap(scratch.spare);
  };
  switch (op.kind) {
    case PixelOpKind::kIdentity:
      return;
    case PixelOpKind::kAffine:
    case PixelOpKind::kRotate: {
      const bool rotate = op.kind == PixelOpKind::kRotate;
      // v2's tensor rotate turns by torch.rot90 at 0, 90, 180 and 270 degrees about the default centre, as
      // PIL's Image.rotate does by transposes (pil_rotate); otherwise the inverse affine matrix.
      if (rotate && !pil && op.api == TorchvisionApi::kV2 && detail::quarter_turn(op.angle, op.center, width, height)) {
        return into_spare([&](uint8_t* dst) { detail::turn(rgb, width, height, op.angle, dst); });
      }
      if (pil && rotate) {
        return into_spare([&](uint8_t* dst) {
          detail::pil_rotate(rgb, width, height, op.angle, op.center, op.interpolation, detail::pil_fill(op.fill), dst);
        });
      }
      if (pil) {
        const std::array<double, 2> center = op.center ? *op.center : std::array<double, 2>{width * 0.5, height * 0.5};
        const auto m = inverse_affine_matrix(op.api, center, op.angle, op.translate_x, op.translate_y, op.scale,
                                             op.shear_x, op.shear_y);
        return into_spare([&](uint8_t* dst) {
          detail::pil_affine(rgb, width, height, m, op.interpolation, detail::pil_fill(op.fill), dst);
        });
      }
      const auto m =
          rotate ? inverse_affine_matrix(op.api, tensor_center(op, width, height), -op.angle, 0.0, 0.0, 1.0, 0.0, 0.0)
                 : inverse_affine_matrix(op.api, tensor_center(op, width, height), op.angle, op.translate_x,
                                         op.translate_y, op.scale, op.shear_x, op.shear_y);
      return into_spare([&](uint8_t* dst) {
        detail::tensor_affine(rgb, width, height, m, op.interpolation, op.fill, op.api, dst, scratch.floats);
      });
    }
    case PixelOpKind::kBrightness:
      return pil ? detail::pil_brightness(rgb, n, op.factor) : detail::tensor_brightness(rgb, n, op.factor);
    case PixelOpKind::kContrast:
      return pil ? detail::pil_contrast(rgb, n, op.factor) : detail::tensor_contrast(rgb, n, op.factor, op.api);
    case PixelOpKind::kSaturation:
      return pil ? detail::pil_color(rgb, n, op.factor, scratch.spare)
                 : detail::tensor_saturation(rgb, n, op.factor, op.api, scratch.spare);
    case PixelOpKind::kSharpness:
      return pil ? detail::pil_sharpness(rgb, width, height, op.factor, scratch.spare)
                 : detail::tensor_sharpness(rgb, width, height, op.factor, op.api, scratch.spare);
    case PixelOpKind::kHue:
      return detail::pil_hue(rgb, n, op.factor);
    case PixelOpKind::kPosterize:
      return detail::posterize(rgb, n, op.bits);
    case PixelOpKind::kSolarize:
      return detail::solarize(rgb, n, op.factor, !pil);
    case PixelOpKind::kAutoContrast:
      return pil ? detail::pil_autocontrast(rgb, n) : detail::tensor_autocontrast(rgb, n, op.api);
    case PixelOpKind::kEqualize:
      return detail::equalize(rgb, n);
    case PixelOpKind::kInvert:
      return detail::invert(rgb, n);
    case PixelOpKind::kGrayscale:
      return pil ? detail::pil_grayscale(rgb, n) : detail::tensor_grayscale(rgb, n, op.api);
    case PixelOpKind::kGaussianBlur:
      return detail::tensor_gaussian_blur(rgb, width, height, op.kernel_width, op.kernel_height, op.sigma_x, op.sigma_y,
                                          op.api, scratch.floats, scratch.floats2);
    case PixelOpKind::kHorizontalFlip:
      return detail::horizontal_flip(rgb, width, height);
  }
}

}  // namespace chute
