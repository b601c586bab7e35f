#include "chute/transform/augmix.h"

#include <cmath>
#include <string>

namespace chute {
namespace {

// torchvision's AugMix._augmentation_space order (all_ops adds the last four).
constexpr AugmentOp kAugMixOps[13] = {AugmentOp::kShearX,     AugmentOp::kShearY,       AugmentOp::kTranslateX,
                                      AugmentOp::kTranslateY, AugmentOp::kRotate,       AugmentOp::kPosterize,
                                      AugmentOp::kSolarize,   AugmentOp::kAutoContrast, AugmentOp::kEqualize,
                                      AugmentOp::kBrightness, AugmentOp::kColor,        AugmentOp::kContrast,
                                      AugmentOp::kSharpness};
constexpr int kParameterMax = 10;  // AugMix's bins

}  // namespace

double sample_gamma(double alpha, SampleRng& rng) {
  if (alpha < 1.0) return sample_gamma(alpha + 1.0, rng) * std::pow(rng.open_uniform(), 1.0 / alpha);
  const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = rng.normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng.open_uniform();  // 53 bits: the tails need more than uniform()'s 24
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

void sample_dirichlet(double alpha, int n, SampleRng& rng, float* out) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += (out[i] = static_cast<float>(sample_gamma(alpha, rng)));
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(out[i] / sum);
}

Status validate(const AugMix& t) {
  if (t.severity < 1 || t.severity > kParameterMax)
    return invalid_argument("AugMix: the severity must be between [1, 10]. Got " + std::to_string(t.severity) +
                            " instead.");
  if (t.mixture_width < 1)
    return invalid_argument("AugMix: mixture_width must be positive, got " + std::to_string(t.mixture_width));
  if (!(t.alpha > 0.0 && std::isfinite(t.alpha)))
    return invalid_argument("AugMix: alpha must be positive, got " + std::to_string(t.alpha));
  return Status::ok();
}

void draw_augmix(const AugMix& t, SampleRng& rng, int width, int height, AugMixDraw& out) {
  out.clear();
  float m[2];
  sample_dirichlet(t.alpha, 2, rng, m);
  out.original_weight = m[0];
  out.chain_weights.resize(static_cast<size_t>(t.mixture_width));
  sample_dirichlet(t.alpha, t.mixture_width, rng, out.chain_weights.data());
  for (float& w : out.chain_weights) w *= m[1];
  const int num_ops = t.all_ops ? 13 : 9;
  for (int i = 0; i < t.mixture_width; ++i) {
    const int depth = t.chain_depth > 0 ? t.chain_depth : static_cast<int>(rng.integer(1, 3));
    out.chain_depths.push_back(depth);
    for (int k = 0; k < depth; ++k) {
      const AugmentOp op = kAugMixOps[rng.integer(0, num_ops - 1)];
      // magnitudes[randint(severity)] of the 10 bins, then the sign
      const int bin = op_has_magnitudes(op) ? static_cast<int>(rng.integer(0, t.severity - 1)) : 0;
      out.ops.push_back(draw_op(MagnitudeSpace::kAugMix, op, bin, kParameterMax, rng, width, height, t.options.api));
    }
  }
}

void apply_augmix(const AugMix& t, const AugMixDraw& draw, std::vector<uint8_t>& pixels, int width, int height,
                  AugMixScratch& scratch) {
  const size_t n = static_cast<size_t>(width) * height * 3;
  // mix = m[:, 0] * batch; per chain: mix.add_(combined_weights[:, i] * aug); mix.to(uint8).
  scratch.mix.resize(n);
  float* mix = scratch.mix.data();
  for (size_t i = 0; i < n; ++i) mix[i] = draw.original_weight * static_cast<float>(pixels[i]);
  size_t next = 0;
  for (size_t c = 0; c < draw.chain_depths.size(); ++c) {
    scratch.chain.assign(pixels.begin(), pixels.end());
    for (int k = 0; k < draw.chain_depths[c]; ++k, ++next) {
      const PixelOp op = augment_pixel_op(draw.ops[next], t.options);
      apply_pixel_op(op, scratch.chain, width, height, scratch.pixel);
    }
    const float w = draw.chain_weights[c];
    const uint8_t* aug = scratch.chain.data();
    for (size_t i = 0; i < n; ++i) mix[i] = mix[i] + w * static_cast<float>(aug[i]);
  }
  for (size_t i = 0; i < n; ++i) pixels[i] = static_cast<uint8_t>(mix[i] < 255.0f ? mix[i] : 255.0f);
}

}  // namespace chute
