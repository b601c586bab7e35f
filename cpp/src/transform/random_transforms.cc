#include "chute/transform/random_transforms.h"

#include <cmath>
#include <string>
#include <utility>

namespace chute {
namespace {

std::string range_text(const Range& r) { return "(" + std::to_string(r[0]) + ", " + std::to_string(r[1]) + ")"; }

Status check_range(const char* transform, const char* name, const std::optional<Range>& r, double lo, double hi) {
  if (r && !(lo <= (*r)[0] && (*r)[0] <= (*r)[1] && (*r)[1] <= hi))
    return invalid_argument(std::string(transform) + ": " + name + " values should be between " + range_text({lo, hi}) +
                            " and of the form (min, max), got " + range_text(*r));
  return Status::ok();
}

Status check_ordered(const char* transform, const char* name, const std::optional<Range>& r) {
  if (r && !((*r)[0] <= (*r)[1] && std::isfinite((*r)[0]) && std::isfinite((*r)[1])))
    return invalid_argument(std::string(transform) + ": " + name +
                            " should be finite and of the form (min, max), got " + range_text(*r));
  return Status::ok();
}

// torch.rand(1) < p, the comparison in float32 (a float tensor against a Python float).
bool coin(SampleRng& rng, double p) { return rng.uniform() < static_cast<float>(p); }

PixelOp geometric(PixelOpKind kind, const auto& t) {
  PixelOp op;
  op.kind = kind;
  op.backend = t.backend;
  op.api = t.api;
  op.interpolation = t.interpolation;
  op.fill = t.fill;
  op.center = t.center;
  return op;
}

}  // namespace

Status validate(const ColorJitter& t) {
  constexpr double kInf = INFINITY;
  CHUTE_RETURN_IF_ERROR(check_range("ColorJitter", "brightness", t.brightness, 0.0, kInf));
  CHUTE_RETURN_IF_ERROR(check_range("ColorJitter", "contrast", t.contrast, 0.0, kInf));
  CHUTE_RETURN_IF_ERROR(check_range("ColorJitter", "saturation", t.saturation, 0.0, kInf));
  CHUTE_RETURN_IF_ERROR(check_range("ColorJitter", "hue", t.hue, -0.5, 0.5));
  if (t.hue && t.backend == PixelBackend::kTensor)
    return unsupported("ColorJitter: hue is implemented with the PIL arithmetic only (backend='pil')");
  return Status::ok();
}

Status validate(const RandomGrayscale& t) {
  if (!(t.p >= 0.0 && t.p <= 1.0)) return invalid_argument("RandomGrayscale: p must be in [0, 1]");
  return Status::ok();
}

Status validate(const GaussianBlur& t) {
  if (t.kernel_width <= 0 || t.kernel_height <= 0 || t.kernel_width % 2 == 0 || t.kernel_height % 2 == 0)
    return invalid_argument("GaussianBlur: kernel size value should be an odd and positive number");
  if (!(0.0 < t.sigma_min && t.sigma_min <= t.sigma_max && std::isfinite(t.sigma_max)))
    return invalid_argument("GaussianBlur: sigma values should be positive and of the form (min, max)");
  return Status::ok();
}

Status validate(const RandomRotation& t) { return check_ordered("RandomRotation", "degrees", t.degrees); }

Status validate(const RandomAffine& t) {
  CHUTE_RETURN_IF_ERROR(check_ordered("RandomAffine", "degrees", t.degrees));
  // translate is (max_dx, max_dy) as fractions, not a range.
  if (t.translate)
    for (double v : *t.translate)
      if (!(v >= 0.0 && v <= 1.0))
        return invalid_argument("RandomAffine: translation values should be between 0 and 1");
  if (t.scale && !((*t.scale)[0] > 0.0 && (*t.scale)[0] <= (*t.scale)[1] && std::isfinite((*t.scale)[1])))
    return invalid_argument("RandomAffine: scale values should be positive and of the form (min, max)");
  CHUTE_RETURN_IF_ERROR(check_ordered("RandomAffine", "shear", t.shear_x));
  return check_ordered("RandomAffine", "shear", t.shear_y);
}

void draw_ops(const ColorJitter& t, SampleRng& rng, int, int, std::vector<PixelOp>& out) {
  // get_params: fn_idx = randperm(4), then each factor drawn where its range is set.
  int order[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.integer(0, i)]);
  const std::optional<Range>* ranges[4] = {&t.brightness, &t.contrast, &t.saturation, &t.hue};
  double factors[4] = {};
  for (int i = 0; i < 4; ++i)
    if (*ranges[i]) factors[i] = rng.uniform((**ranges[i])[0], (**ranges[i])[1]);
  constexpr PixelOpKind kKinds[4] = {PixelOpKind::kBrightness, PixelOpKind::kContrast, PixelOpKind::kSaturation,
                                     PixelOpKind::kHue};
  for (int fn : order) {
    if (!*ranges[fn]) continue;
    PixelOp op;
    op.kind = kKinds[fn];
    op.backend = t.backend;
    op.api = t.api;
    op.factor = factors[fn];
    out.push_back(op);
  }
}

void draw_ops(const RandomGrayscale& t, SampleRng& rng, int, int, std::vector<PixelOp>& out) {
  if (!coin(rng, t.p)) return;
  PixelOp op;
  op.kind = PixelOpKind::kGrayscale;
  op.backend = t.backend;
  op.api = t.api;
  out.push_back(op);
}

void draw_ops(const GaussianBlur& t, SampleRng& rng, int, int, std::vector<PixelOp>& out) {
  PixelOp op;
  op.kind = PixelOpKind::kGaussianBlur;
  op.backend = PixelBackend::kTensor;
  op.api = t.api;
  op.kernel_width = t.kernel_width;
  op.kernel_height = t.kernel_height;
  op.sigma_x = op.sigma_y = rng.uniform(t.sigma_min, t.sigma_max);
  out.push_back(op);
}

void draw_ops(const RandomRotation& t, SampleRng& rng, int, int, std::vector<PixelOp>& out) {
  PixelOp op = geometric(PixelOpKind::kRotate, t);
  op.angle = rng.uniform(t.degrees[0], t.degrees[1]);
  out.push_back(op);
}

void draw_ops(const RandomAffine& t, SampleRng& rng, int width, int height, std::vector<PixelOp>& out) {
  PixelOp op = geometric(PixelOpKind::kAffine, t);
  op.angle = rng.uniform(t.degrees[0], t.degrees[1]);
  if (t.translate) {
    // tx = int(round(uniform(-max_dx, max_dx))): Python's round, half to even.
    const double max_dx = (*t.translate)[0] * width, max_dy = (*t.translate)[1] * height;
    op.translate_x = std::nearbyint(rng.uniform(-max_dx, max_dx));
    op.translate_y = std::nearbyint(rng.uniform(-max_dy, max_dy));
  }
  if (t.scale) op.scale = rng.uniform((*t.scale)[0], (*t.scale)[1]);
  if (t.shear_x) op.shear_x = rng.uniform((*t.shear_x)[0], (*t.shear_x)[1]);
  if (t.shear_y) op.shear_y = rng.uniform((*t.shear_y)[0], (*t.shear_y)[1]);
  out.push_back(op);
}

}  // namespace chute
