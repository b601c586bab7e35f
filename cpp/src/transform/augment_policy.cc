#include "chute/transform/augment_policy.h"

#include <cmath>
#include <string>
#include <utility>

#include "transform/detail/tensor_ops.h"

namespace chute {
namespace {

constexpr std::pair<AugmentOp, const char*> kOpNames[] = {
    {AugmentOp::kIdentity, "Identity"},
    {AugmentOp::kShearX, "ShearX"},
    {AugmentOp::kShearY, "ShearY"},
    {AugmentOp::kTranslateX, "TranslateX"},
    {AugmentOp::kTranslateY, "TranslateY"},
    {AugmentOp::kRotate, "Rotate"},
    {AugmentOp::kBrightness, "Brightness"},
    {AugmentOp::kColor, "Color"},
    {AugmentOp::kContrast, "Contrast"},
    {AugmentOp::kSharpness, "Sharpness"},
    {AugmentOp::kPosterize, "Posterize"},
    {AugmentOp::kSolarize, "Solarize"},
    {AugmentOp::kAutoContrast, "AutoContrast"},
    {AugmentOp::kEqualize, "Equalize"},
    {AugmentOp::kInvert, "Invert"},
};

constexpr std::pair<AutoAugmentPolicy, const char*> kPolicyNames[] = {{AutoAugmentPolicy::kImageNet, "imagenet"},
                                                                      {AutoAugmentPolicy::kCifar10, "cifar10"},
                                                                      {AutoAugmentPolicy::kSvhn, "svhn"}};

// One AutoAugment sub-policy op: the op, its probability, its magnitude bin (-1: None).
struct PolicyStep {
  AugmentOp op;
  double p;
  int bin;
};
using SubPolicy = std::pair<PolicyStep, PolicyStep>;

using A = AugmentOp;
// torchvision's AutoAugment._get_policies, transcribed in order.
constexpr SubPolicy kImageNet[25] = {
    {{A::kPosterize, 0.4, 8}, {A::kRotate, 0.6, 9}},    {{A::kSolarize, 0.6, 5}, {A::kAutoContrast, 0.6, -1}},
    {{A::kEqualize, 0.8, -1}, {A::kEqualize, 0.6, -1}}, {{A::kPosterize, 0.6, 7}, {A::kPosterize, 0.6, 6}},
    {{A::kEqualize, 0.4, -1}, {A::kSolarize, 0.2, 4}},  {{A::kEqualize, 0.4, -1}, {A::kRotate, 0.8, 8}},
    {{A::kSolarize, 0.6, 3}, {A::kEqualize, 0.6, -1}},  {{A::kPosterize, 0.8, 5}, {A::kEqualize, 1.0, -1}},
    {{A::kRotate, 0.2, 3}, {A::kSolarize, 0.6, 8}},     {{A::kEqualize, 0.6, -1}, {A::kPosterize, 0.4, 6}},
    {{A::kRotate, 0.8, 8}, {A::kColor, 0.4, 0}},        {{A::kRotate, 0.4, 9}, {A::kEqualize, 0.6, -1}},
    {{A::kEqualize, 0.0, -1}, {A::kEqualize, 0.8, -1}}, {{A::kInvert, 0.6, -1}, {A::kEqualize, 1.0, -1}},
    {{A::kColor, 0.6, 4}, {A::kContrast, 1.0, 8}},      {{A::kRotate, 0.8, 8}, {A::kColor, 1.0, 2}},
    {{A::kColor, 0.8, 8}, {A::kSolarize, 0.8, 7}},      {{A::kSharpness, 0.4, 7}, {A::kInvert, 0.6, -1}},
    {{A::kShearX, 0.6, 5}, {A::kEqualize, 1.0, -1}},    {{A::kColor, 0.4, 0}, {A::kEqualize, 0.6, -1}},
    {{A::kEqualize, 0.4, -1}, {A::kSolarize, 0.2, 4}},  {{A::kSolarize, 0.6, 5}, {A::kAutoContrast, 0.6, -1}},
    {{A::kInvert, 0.6, -1}, {A::kEqualize, 1.0, -1}},   {{A::kColor, 0.6, 4}, {A::kContrast, 1.0, 8}},
    {{A::kEqualize, 0.8, -1}, {A::kEqualize, 0.6, -1}},
};
constexpr SubPolicy kCifar10[25] = {
    {{A::kInvert, 0.1, -1}, {A::kContrast, 0.2, 6}},         {{A::kRotate, 0.7, 2}, {A::kTranslateX, 0.3, 9}},
    {{A::kSharpness, 0.8, 1}, {A::kSharpness, 0.9, 3}},      {{A::kShearY, 0.5, 8}, {A::kTranslateY, 0.7, 9}},
    {{A::kAutoContrast, 0.5, -1}, {A::kEqualize, 0.9, -1}},  {{A::kShearY, 0.2, 7}, {A::kPosterize, 0.3, 7}},
    {{A::kColor, 0.4, 3}, {A::kBrightness, 0.6, 7}},         {{A::kSharpness, 0.3, 9}, {A::kBrightness, 0.7, 9}},
    {{A::kEqualize, 0.6, -1}, {A::kEqualize, 0.5, -1}},      {{A::kContrast, 0.6, 7}, {A::kSharpness, 0.6, 5}},
    {{A::kColor, 0.7, 7}, {A::kTranslateX, 0.5, 8}},         {{A::kEqualize, 0.3, -1}, {A::kAutoContrast, 0.4, -1}},
    {{A::kTranslateY, 0.4, 3}, {A::kSharpness, 0.2, 6}},     {{A::kBrightness, 0.9, 6}, {A::kColor, 0.2, 8}},
    {{A::kSolarize, 0.5, 2}, {A::kInvert, 0.0, -1}},         {{A::kEqualize, 0.2, -1}, {A::kAutoContrast, 0.6, -1}},
    {{A::kEqualize, 0.2, -1}, {A::kEqualize, 0.6, -1}},      {{A::kColor, 0.9, 9}, {A::kEqualize, 0.6, -1}},
    {{A::kAutoContrast, 0.8, -1}, {A::kSolarize, 0.2, 8}},   {{A::kBrightness, 0.1, 3}, {A::kColor, 0.7, 0}},
    {{A::kSolarize, 0.4, 5}, {A::kAutoContrast, 0.9, -1}},   {{A::kTranslateY, 0.9, 9}, {A::kTranslateY, 0.7, 9}},
    {{A::kAutoContrast, 0.9, -1}, {A::kSolarize, 0.8, 3}},   {{A::kEqualize, 0.8, -1}, {A::kInvert, 0.1, -1}},
    {{A::kTranslateY, 0.7, 9}, {A::kAutoContrast, 0.9, -1}},
};
constexpr SubPolicy kSvhn[25] = {
    {{A::kShearX, 0.9, 4}, {A::kInvert, 0.2, -1}},        {{A::kShearY, 0.9, 8}, {A::kInvert, 0.7, -1}},
    {{A::kEqualize, 0.6, -1}, {A::kSolarize, 0.6, 6}},    {{A::kInvert, 0.9, -1}, {A::kEqualize, 0.6, -1}},
    {{A::kEqualize, 0.6, -1}, {A::kRotate, 0.9, 3}},      {{A::kShearX, 0.9, 4}, {A::kAutoContrast, 0.8, -1}},
    {{A::kShearY, 0.9, 8}, {A::kInvert, 0.4, -1}},        {{A::kShearY, 0.9, 5}, {A::kSolarize, 0.2, 6}},
    {{A::kInvert, 0.9, -1}, {A::kAutoContrast, 0.8, -1}}, {{A::kEqualize, 0.6, -1}, {A::kRotate, 0.9, 3}},
    {{A::kShearX, 0.9, 4}, {A::kSolarize, 0.3, 3}},       {{A::kShearY, 0.8, 8}, {A::kInvert, 0.7, -1}},
    {{A::kEqualize, 0.9, -1}, {A::kTranslateY, 0.6, 6}},  {{A::kInvert, 0.9, -1}, {A::kEqualize, 0.6, -1}},
    {{A::kContrast, 0.3, 3}, {A::kRotate, 0.8, 4}},       {{A::kInvert, 0.8, -1}, {A::kTranslateY, 0.0, 2}},
    {{A::kShearY, 0.7, 6}, {A::kSolarize, 0.4, 8}},       {{A::kInvert, 0.6, -1}, {A::kRotate, 0.8, 4}},
    {{A::kShearY, 0.3, 7}, {A::kTranslateX, 0.9, 3}},     {{A::kShearX, 0.1, 6}, {A::kInvert, 0.6, -1}},
    {{A::kSolarize, 0.7, 2}, {A::kTranslateY, 0.6, 7}},   {{A::kShearY, 0.8, 4}, {A::kInvert, 0.8, -1}},
    {{A::kShearX, 0.7, 9}, {A::kTranslateY, 0.8, 3}},     {{A::kShearY, 0.8, 5}, {A::kAutoContrast, 0.7, -1}},
    {{A::kShearX, 0.7, 2}, {A::kInvert, 0.1, -1}},
};

const SubPolicy* sub_policies(AutoAugmentPolicy policy) {
  switch (policy) {
    case AutoAugmentPolicy::kCifar10:
      return kCifar10;
    case AutoAugmentPolicy::kSvhn:
      return kSvhn;
    default:
      return kImageNet;
  }
}

// math.degrees: x * (180 / pi).
inline double degrees(double radians) { return radians * (180.0 / M_PI); }

// (k - (arange(n) / ((n - 1) / d)).round().int())[bin]: the division in float32, rounded half to even.
int posterize_bits(int top, int divisions, int bin, int num_bins) {
  const float step = static_cast<float>((num_bins - 1) / static_cast<double>(divisions));
  return top - static_cast<int>(std::nearbyint(static_cast<float>(bin) / step));
}

Status check_bins(const char* name, int num_bins) {
  if (num_bins < 2)
    return invalid_argument(std::string(name) + ": num_magnitude_bins must be at least 2, got " +
                            std::to_string(num_bins));
  return Status::ok();
}

}  // namespace

const AugmentOp kRandAugmentOps[14] = {A::kIdentity,  A::kShearX,     A::kShearY,       A::kTranslateX, A::kTranslateY,
                                       A::kRotate,    A::kBrightness, A::kColor,        A::kContrast,   A::kSharpness,
                                       A::kPosterize, A::kSolarize,   A::kAutoContrast, A::kEqualize};

const char* augment_op_name(AugmentOp op) {
  for (const auto& [o, name] : kOpNames)
    if (o == op) return name;
  return "?";
}

Result<AugmentOp> parse_augment_op(std::string_view name) {
  for (const auto& [o, n] : kOpNames)
    if (name == n) return o;
  return invalid_argument("unknown augmentation op '" + std::string(name) + "'");
}

const char* auto_augment_policy_name(AutoAugmentPolicy policy) {
  for (const auto& [p, name] : kPolicyNames)
    if (p == policy) return name;
  return "?";
}

Result<AutoAugmentPolicy> parse_auto_augment_policy(std::string_view name) {
  for (const auto& [p, n] : kPolicyNames)
    if (name == n) return p;
  return invalid_argument("AutoAugment: the provided policy " + std::string(name) +
                          " is not recognized (imagenet, cifar10 or svhn)");
}

bool op_signed(AugmentOp op) {
  switch (op) {
    case A::kShearX:
    case A::kShearY:
    case A::kTranslateX:
    case A::kTranslateY:
    case A::kRotate:
    case A::kBrightness:
    case A::kColor:
    case A::kContrast:
    case A::kSharpness:
      return true;
    default:
      return false;
  }
}

bool op_has_magnitudes(AugmentOp op) { return op_signed(op) || op == A::kPosterize || op == A::kSolarize; }

double op_magnitude(MagnitudeSpace space, AugmentOp op, int bin, int num_bins, int width, int height,
                    TorchvisionApi api) {
  const bool wide = space == MagnitudeSpace::kTrivialAugmentWide;
  const auto lin = [&](double end) { return static_cast<double>(detail::torch_linspace(0.0, end, num_bins, bin)); };
  switch (op) {
    case A::kShearX:
    case A::kShearY:
      return lin(wide ? 0.99 : 0.3);
    case A::kTranslateX:
      if (wide) return lin(32.0);
      return lin(space == MagnitudeSpace::kAugMix ? width / 3.0 : 150.0 / 331.0 * width);
    case A::kTranslateY:
      if (wide) return lin(32.0);
      return lin(space == MagnitudeSpace::kAugMix ? height / 3.0 : 150.0 / 331.0 * height);
    case A::kRotate:
      return lin(wide ? 135.0 : 30.0);
    case A::kBrightness:
    case A::kColor:
    case A::kContrast:
    case A::kSharpness:
      return lin(wide ? 0.99 : 0.9);
    case A::kPosterize:
      return space == MagnitudeSpace::kAugMix ? posterize_bits(4, 4, bin, num_bins)
                                              : posterize_bits(8, wide ? 6 : 4, bin, num_bins);
    case A::kSolarize:  // v2: bound * linspace(1.0, 0.0)
      if (api == TorchvisionApi::kV2) return 255.0 * detail::torch_linspace(1.0, 0.0, num_bins, bin);
      return detail::torch_linspace(255.0, 0.0, num_bins, bin);
    default:
      return 0.0;
  }
}

OpDraw draw_op(MagnitudeSpace space, AugmentOp op, int bin, int num_bins, SampleRng& rng, int width, int height,
               TorchvisionApi api) {
  OpDraw d{op, 0.0};
  if (op_has_magnitudes(op)) {
    if (bin < 0) bin = static_cast<int>(rng.integer(0, num_bins - 1));
    d.magnitude = op_magnitude(space, op, bin, num_bins, width, height, api);
  }
  if (op_signed(op) && rng.integer(0, 1)) d.magnitude = -d.magnitude;
  return d;
}

PixelOp augment_pixel_op(OpDraw draw, const PolicyOptions& options) {
  PixelOp p;
  p.backend = options.backend;
  p.api = options.api;
  p.interpolation = options.interpolation;
  p.fill = options.fill;
  const double m = draw.magnitude;
  switch (draw.op) {
    case A::kIdentity:
      p.kind = PixelOpKind::kIdentity;
      break;
    case A::kShearX:
    case A::kShearY:
      p.kind = PixelOpKind::kAffine;
      (draw.op == A::kShearX ? p.shear_x : p.shear_y) = degrees(std::atan(m));
      p.center = std::array<double, 2>{0.0, 0.0};
      break;
    case A::kTranslateX:
    case A::kTranslateY:
      p.kind = PixelOpKind::kAffine;
      (draw.op == A::kTranslateX ? p.translate_x : p.translate_y) = std::trunc(m);  // int(magnitude)
      break;
    case A::kRotate:
      p.kind = PixelOpKind::kRotate;
      p.angle = m;
      break;
    case A::kBrightness:
    case A::kColor:
    case A::kContrast:
    case A::kSharpness:
      p.kind = draw.op == A::kBrightness ? PixelOpKind::kBrightness
               : draw.op == A::kColor    ? PixelOpKind::kSaturation
               : draw.op == A::kContrast ? PixelOpKind::kContrast
                                         : PixelOpKind::kSharpness;
      p.factor = 1.0 + m;
      break;
    case A::kPosterize:
      p.kind = PixelOpKind::kPosterize;
      p.bits = static_cast<int>(m);
      break;
    case A::kSolarize:
      p.kind = PixelOpKind::kSolarize;
      p.factor = m;
      break;
    case A::kAutoContrast:
      p.kind = PixelOpKind::kAutoContrast;
      break;
    case A::kEqualize:
      p.kind = PixelOpKind::kEqualize;
      break;
    case A::kInvert:
      p.kind = PixelOpKind::kInvert;
      break;
  }
  return p;
}

Status validate(const AutoAugment&) { return Status::ok(); }

Status validate(const RandAugment& t) {
  CHUTE_RETURN_IF_ERROR(check_bins("RandAugment", t.num_magnitude_bins));
  if (t.num_ops < 0)
    return invalid_argument("RandAugment: num_ops must be non-negative, got " + std::to_string(t.num_ops));
  if (t.magnitude < 0 || t.magnitude >= t.num_magnitude_bins)
    return invalid_argument("RandAugment: magnitude must be in [0, num_magnitude_bins), got " +
                            std::to_string(t.magnitude) + " with " + std::to_string(t.num_magnitude_bins) + " bins");
  return Status::ok();
}

Status validate(const TrivialAugmentWide& t) { return check_bins("TrivialAugmentWide", t.num_magnitude_bins); }

void draw_ops(const AutoAugment& t, SampleRng& rng, int width, int height, std::vector<OpDraw>& out) {
  // get_params: the sub-policy, then for each of its ops a coin (applied when rand() <= p, compared in
  // float32 as torch compares a float tensor with a Python float) and a sign.
  const SubPolicy& sub = sub_policies(t.policy)[rng.integer(0, 24)];
  const double coins[2] = {rng.uniform(), rng.uniform()};
  const PolicyStep steps[2] = {sub.first, sub.second};
  for (int i = 0; i < 2; ++i) {
    const bool sign_negative = rng.integer(0, 1) == 0;  // signs[i] == 0
    if (!(coins[i] <= static_cast<float>(steps[i].p))) continue;
    OpDraw d{steps[i].op, 0.0};
    if (steps[i].bin >= 0)
      d.magnitude = op_magnitude(MagnitudeSpace::kAutoAugment, d.op, steps[i].bin, 10, width, height);
    if (op_signed(d.op) && sign_negative) d.magnitude = -d.magnitude;
    out.push_back(d);
  }
}

void draw_ops(const RandAugment& t, SampleRng& rng, int width, int height, std::vector<OpDraw>& out) {
  for (int i = 0; i < t.num_ops; ++i) {
    const AugmentOp op = kRandAugmentOps[rng.integer(0, 13)];
    out.push_back(draw_op(MagnitudeSpace::kRandAugment, op, t.magnitude, t.num_magnitude_bins, rng, width, height,
                          t.options.api));
  }
}

void draw_ops(const TrivialAugmentWide& t, SampleRng& rng, int width, int height, std::vector<OpDraw>& out) {
  const AugmentOp op = kRandAugmentOps[rng.integer(0, 13)];
  out.push_back(
      draw_op(MagnitudeSpace::kTrivialAugmentWide, op, -1, t.num_magnitude_bins, rng, width, height, t.options.api));
}

}  // namespace chute
