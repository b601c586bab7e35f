// The automatic augmentation policies with torchvision's names, arguments and draws: AutoAugment
// (ImageNet, CIFAR10 and SVHN sub-policies), RandAugment and TrivialAugmentWide. A policy draws, per
// sample, which of torchvision's ops (_apply_op's names) it applies at which magnitude, from the sample's
// SampleRng; each drawn op becomes the functional call torchvision's _apply_op makes (a PixelOp), with
// torchvision's magnitude bins bit for bit (torch.linspace in float32, the posterize bits rounded half to
// even). The draws follow torchvision's distribution (which op, which bin, the sign, the probabilities),
// not its random stream: chute's stream is keyed by (seed, epoch, sample index).
// Thread-safety: the policies are immutable values; the functions are pure given the SampleRng.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "chute/base/rng.h"
#include "chute/base/status.h"
#include "chute/transform/pixel_ops.h"

namespace chute {

// The ops of torchvision's _apply_op, by its names ("ShearX", "Brightness", ...).
enum class AugmentOp : uint8_t {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
};
const char* augment_op_name(AugmentOp op);
Result<AugmentOp> parse_augment_op(std::string_view name);

// One drawn op: the op and its signed magnitude, as v1's _apply_op receives them (v2's Solarize takes a
// fraction of 255: here its threshold, 255 * fraction).
struct OpDraw {
  AugmentOp op = AugmentOp::kIdentity;
  double magnitude = 0.0;
};

// What every policy shares: torchvision's interpolation (NEAREST) and fill (None) defaults, and which of
// torchvision's implementations the ops reproduce: kPil where the policy runs on a PIL image (the
// reference recipes), kTensor after a PILToTensor; v1 (torchvision.transforms) or v2.
struct PolicyOptions {
  Interpolation interpolation = Interpolation::kNearest;
  Fill fill;
  PixelBackend backend = PixelBackend::kPil;
  TorchvisionApi api = TorchvisionApi::kV1;
};

// torchvision's _apply_op: the functional call an op at a magnitude makes (ShearX: affine with shear
// degrees(atan(m)) about (0, 0); TranslateX: translate int(m); Brightness: adjust_brightness(1 + m);
// Posterize: int(m) bits; ...), with the options' interpolation, fill, backend and API.
PixelOp augment_pixel_op(OpDraw draw, const PolicyOptions& options);

enum class AutoAugmentPolicy : uint8_t { kImageNet, kCifar10, kSvhn };
const char* auto_augment_policy_name(AutoAugmentPolicy policy);  // "imagenet", "cifar10", "svhn"
Result<AutoAugmentPolicy> parse_auto_augment_policy(std::string_view name);

// One of the policy's 25 sub-policies at random; each of its two ops applies with its probability, at
// its magnitude bin of 10, the sign at random.
struct AutoAugment {
  AutoAugmentPolicy policy = AutoAugmentPolicy::kImageNet;
  PolicyOptions options;
};

// `num_ops` ops, each uniform over 14 (Identity included), all at bin `magnitude` of
// `num_magnitude_bins`, the sign at random.
struct RandAugment {
  int num_ops = 2;
  int magnitude = 9;
  int num_magnitude_bins = 31;
  PolicyOptions options;
};

// One op uniform over 14, its bin uniform over `num_magnitude_bins` of the wide ranges, the sign at random.
struct TrivialAugmentWide {
  int num_magnitude_bins = 31;
  PolicyOptions options;
};

// kInvalidArgument naming the argument, as torchvision would refuse it (or where its forward would
// fail: a magnitude outside the bins, fewer than two bins).
Status validate(const AutoAugment& t);
Status validate(const RandAugment& t);
Status validate(const TrivialAugmentWide& t);

// Appends the ops the policy applies to a width x height image, in order.
void draw_ops(const AutoAugment& t, SampleRng& rng, int width, int height, std::vector<OpDraw>& out);
void draw_ops(const RandAugment& t, SampleRng& rng, int width, int height, std::vector<OpDraw>& out);
void draw_ops(const TrivialAugmentWide& t, SampleRng& rng, int width, int height, std::vector<OpDraw>& out);

// A policy's magnitude for `op` at bin `bin` of `num_bins` (0 for the ops without magnitudes), as its
// _augmentation_space computes it: the float32 torch.linspace value, or the posterize bits (v2's Solarize:
// 255 * its float32 fraction).
enum class MagnitudeSpace : uint8_t { kAutoAugment, kRandAugment, kTrivialAugmentWide, kAugMix };
double op_magnitude(MagnitudeSpace space, AugmentOp op, int bin, int num_bins, int width, int height,
                    TorchvisionApi api = TorchvisionApi::kV1);
// Whether the op's magnitude takes a random sign, and whether it has magnitudes at all.
bool op_signed(AugmentOp op);
bool op_has_magnitudes(AugmentOp op);

// torchvision's ops in its dictionary order for RandAugment and TrivialAugmentWide (14, Identity first).
extern const AugmentOp kRandAugmentOps[14];

// The draw of one op of a policy with random bins and signs: its bin from the given one (or, with
// bin < 0, uniform over num_bins when the op has magnitudes), then the sign: `signed and randint(2)`.
OpDraw draw_op(MagnitudeSpace space, AugmentOp op, int bin, int num_bins, SampleRng& rng, int width, int height,
               TorchvisionApi api = TorchvisionApi::kV1);

}  // namespace chute
