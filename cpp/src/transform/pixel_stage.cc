#include "chute/transform/pixel_stage.h"

#include <string>
#include <type_traits>

namespace chute {

void AugmentDraws::clear() {
  steps.clear();
  ops.clear();
  augmix_used = 0;
  erasing.clear();
  policy.clear();
}

Status PixelStage::add(PixelTransform t) {
  const Status st = std::visit(
      [](const auto& x) -> Status {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, FlipHere>) {
          return Status::ok();
        } else {
          return validate(x);
        }
      },
      t);
  CHUTE_RETURN_IF_ERROR(st);
  transforms_.push_back(std::move(t));
  return Status::ok();
}

Status PixelStage::check_size(int width, int height) const {
  for (const PixelTransform& t : transforms_) {
    if (const auto* blur = std::get_if<GaussianBlur>(&t)) {
      PixelOp op;
      op.kind = PixelOpKind::kGaussianBlur;
      op.kernel_width = blur->kernel_width, op.kernel_height = blur->kernel_height;
      CHUTE_RETURN_IF_ERROR(check_pixel_op(op, width, height));
    }
  }
  return Status::ok();
}

bool PixelStage::flips() const {
  for (const PixelTransform& t : transforms_)
    if (std::holds_alternative<FlipHere>(t)) return true;
  return false;
}

void PixelStage::draw(SampleRng& rng, int width, int height, AugmentDraws& draws) const {
  for (const PixelTransform& t : transforms_) {
    AugmentDraws::Step step;
    step.begin = static_cast<uint32_t>(draws.ops.size());
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, FlipHere>) {
            step.flip = true;
          } else if constexpr (std::is_same_v<T, AugMix>) {
            if (draws.augmix.size() == draws.augmix_used) draws.augmix.emplace_back();
            step.augmix = static_cast<int32_t>(draws.augmix_used);
            draw_augmix(x, rng, width, height, draws.augmix[draws.augmix_used++]);
          } else if constexpr (std::is_same_v<T, AutoAugment> || std::is_same_v<T, RandAugment> ||
                               std::is_same_v<T, TrivialAugmentWide>) {
            draws.policy.clear();
            draw_ops(x, rng, width, height, draws.policy);
            for (const OpDraw& d : draws.policy) draws.ops.push_back(augment_pixel_op(d, x.options));
          } else {
            draw_ops(x, rng, width, height, draws.ops);
          }
        },
        t);
    step.end = static_cast<uint32_t>(draws.ops.size());
    draws.steps.push_back(step);
  }
}

void PixelStage::apply(const AugmentDraws& draws, bool flip, std::vector<uint8_t>& pixels, int width, int height,
                       AugmentScratch& scratch) const {
  for (size_t i = 0; i < draws.steps.size(); ++i) {
    const AugmentDraws::Step& step = draws.steps[i];
    if (step.flip) {
      if (!flip) continue;
      PixelOp op;
      op.kind = PixelOpKind::kHorizontalFlip;
      apply_pixel_op(op, pixels, width, height, scratch.pixel);
    } else if (step.augmix >= 0) {
      apply_augmix(std::get<AugMix>(transforms_[i]), draws.augmix[step.augmix], pixels, width, height, scratch.augmix);
    } else {
      for (uint32_t k = step.begin; k < step.end; ++k)
        apply_pixel_op(draws.ops[k], pixels, width, height, scratch.pixel);
    }
  }
}

}  // namespace chute
