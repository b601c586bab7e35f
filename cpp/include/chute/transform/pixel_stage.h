// The pixel stage of a pipeline: the augmentations that act on the resized uint8 image (the policies,
// AugMix, ColorJitter, RandomGrayscale, GaussianBlur, RandomRotation, RandomAffine), in the user's order,
// between the resampler and the output writer; and RandomErasing, which the writer's stage applies to the
// written sample. A sample's draws come from its SampleRng after the plan's (crop, flip) and do not depend
// on its pixels, so they can be drawn, inspected (chute._native.sample_draws) and then applied.
// Thread-safety: PixelStage is immutable after construction; draws and scratch belong to one thread.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "chute/base/rng.h"
#include "chute/base/status.h"
#include "chute/transform/augment_policy.h"
#include "chute/transform/augmix.h"
#include "chute/transform/pixel_ops.h"
#include "chute/transform/random_erasing.h"
#include "chute/transform/random_transforms.h"

namespace chute {

// Where a RandomHorizontalFlip sits among the pixel transforms: the sample's flip (drawn by the plan)
// happens there, on the image, instead of in the writer.
struct FlipHere {};

using PixelTransform = std::variant<AutoAugment, RandAugment, TrivialAugmentWide, AugMix, ColorJitter, RandomGrayscale,
                                    GaussianBlur, RandomRotation, RandomAffine, FlipHere>;

// One sample's draws for the pixel stage and the erasing. Cleared per sample; the vectors keep their
// capacity, so drawing allocates nothing once they have grown.
struct AugmentDraws {
  struct Step {
    uint32_t begin = 0, end = 0;  // the step's ops: ops[begin, end)
    int32_t augmix = -1;          // AugMix: its draw, augmix[augmix]
    bool flip = false;            // FlipHere
  };
  std::vector<Step> steps;  // one per pixel transform, in order
  std::vector<PixelOp> ops;
  std::vector<AugMixDraw> augmix;  // the first augmix_used are this sample's
  size_t augmix_used = 0;
  std::vector<ErasingDraw> erasing;  // one per RandomErasing, in order
  std::vector<OpDraw> policy;        // scratch: a policy's draws before they become ops

  void clear();
};

struct AugmentScratch {
  PixelScratch pixel;
  AugMixScratch augmix;
};

class PixelStage {
 public:
  // Checks the transform's arguments and appends it.
  Status add(PixelTransform t);
  // Checks what the output size allows (a blur kernel's reflection padding must be smaller than the image).
  Status check_size(int width, int height) const;

  bool empty() const { return transforms_.empty(); }
  bool flips() const;  // a FlipHere is among the steps

  // The draws of every step for a width x height image, appended to `draws` (cleared first by the caller).
  void draw(SampleRng& rng, int width, int height, AugmentDraws& draws) const;
  // Applies them to `pixels` (width x height RGB); `flip` is the plan's, done at the FlipHere step.
  void apply(const AugmentDraws& draws, bool flip, std::vector<uint8_t>& pixels, int width, int height,
             AugmentScratch& scratch) const;

 private:
  std::vector<PixelTransform> transforms_;
};

}  // namespace chute
