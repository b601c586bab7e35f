// AugMix with torchvision's arguments and draws: `mixture_width` chains of 1-3 (or `chain_depth`) ops at
// random bins below `severity`, mixed as m0 * image + sum_i w_i * chain_i in float32 (m ~ Dirichlet(alpha,
// alpha), w ~ Dirichlet(alpha, ..., alpha) * m1), truncated to uint8. torchvision runs AugMix on tensors,
// also for PIL input, so the chains use the tensor arithmetic (PixelBackend::kTensor).
// Thread-safety: AugMix is an immutable value; an AugMixDraw and AugMixScratch belong to one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "chute/base/rng.h"
#include "chute/base/status.h"
#include "chute/transform/augment_policy.h"
#include "chute/transform/pixel_ops.h"

namespace chute {

struct AugMix {
  int severity = 3;       // in [1, 10]: bins [0, severity) of 10
  int mixture_width = 3;  // chains
  int chain_depth = -1;   // > 0: ops per chain; otherwise 1, 2 or 3 at random
  double alpha = 1.0;     // Dirichlet / Beta concentration
  bool all_ops = true;    // Brightness, Color, Contrast and Sharpness too
  // AugMix's default interpolation is BILINEAR; its backend is always kTensor (torchvision runs AugMix on
  // tensors, also for PIL input).
  PolicyOptions options = tensor_bilinear();

  static PolicyOptions tensor_bilinear() {
    PolicyOptions o;
    o.interpolation = Interpolation::kBilinear;
    o.backend = PixelBackend::kTensor;
    return o;
  }
};
Status validate(const AugMix& t);

// One sample's draws: the weights and the chains' ops, chain after chain.
struct AugMixDraw {
  float original_weight = 0.0f;      // m[:, 0]
  std::vector<float> chain_weights;  // combined_weights[:, i] = Dirichlet(alpha)[i] * m[:, 1], float32
  std::vector<int> chain_depths;
  std::vector<OpDraw> ops;
  void clear() {
    chain_weights.clear();
    chain_depths.clear();
    ops.clear();
  }
};
void draw_augmix(const AugMix& t, SampleRng& rng, int width, int height, AugMixDraw& out);

struct AugMixScratch {
  std::vector<uint8_t> chain;  // the image one chain works on
  std::vector<float> mix;      // the float32 mixture
  PixelScratch pixel;
};
// Mixes the drawn chains of `pixels` (width x height RGB) into `pixels`.
void apply_augmix(const AugMix& t, const AugMixDraw& draw, std::vector<uint8_t>& pixels, int width, int height,
                  AugMixScratch& scratch);

// Samples of the distributions AugMix draws from (exposed for the distribution tests): Gamma(alpha, 1) by
// Marsaglia and Tsang's method (alpha < 1 through Gamma(alpha + 1) * U^(1 / alpha)), and a Dirichlet as
// normalised Gammas, in float32 like torch._sample_dirichlet.
double sample_gamma(double alpha, SampleRng& rng);
void sample_dirichlet(double alpha, int n, SampleRng& rng, float* out);

}  // namespace chute
