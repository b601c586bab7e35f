// The policies' tables and draws. The frequencies against torchvision's are python/tests/test_augment_draws.py's.
#include "chute/transform/augment_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "chute/transform/augmix.h"

namespace chute {
namespace {

std::vector<OpDraw> draws_of(const auto& policy, uint64_t index, int width = 224, int height = 224) {
  SampleRng rng(7, 0, index);
  std::vector<OpDraw> out;
  draw_ops(policy, rng, width, height, out);
  return out;
}

TEST(AugmentPolicyTest, MagnitudeBinsAreTorchvisions) {
  // torch.linspace(0.0, 0.99, 31)[30] is 0.99 in float32; bin 0 is 0.
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kTrivialAugmentWide, AugmentOp::kShearX, 30, 31, 224, 224), 0.99f);
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kTrivialAugmentWide, AugmentOp::kRotate, 0, 31, 224, 224), 0.0);
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kTrivialAugmentWide, AugmentOp::kRotate, 20, 31, 224, 224), 90.0);
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kRandAugment, AugmentOp::kSolarize, 0, 31, 224, 224), 255.0);
  // v2's Solarize: 255 * linspace(1.0, 0.0) in float32, here 255 * float(1/3) rather than float(85).
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kAutoAugment, AugmentOp::kSolarize, 6, 10, 224, 224, TorchvisionApi::kV2),
            255.0 * static_cast<double>(static_cast<float>(1.0 - 6.0 / 9.0)));
  // TrivialAugmentWide's posterize: 8 - round(i / 5), halves to even (i = 2.5 never occurs; 12.5 does not).
  const int expected[31] = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5,
                            5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2};
  for (int i = 0; i < 31; ++i)
    EXPECT_EQ(op_magnitude(MagnitudeSpace::kTrivialAugmentWide, AugmentOp::kPosterize, i, 31, 224, 224), expected[i])
        << i;
  // AugMix: 4 - round(i / 2.25), down to 0 bits; translate up to a third of the side.
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kAugMix, AugmentOp::kPosterize, 9, 10, 224, 224), 0.0);
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kAugMix, AugmentOp::kTranslateX, 9, 10, 300, 150), 100.0);
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kAugMix, AugmentOp::kTranslateY, 9, 10, 300, 150), 50.0);
  // AutoAugment and RandAugment: 150 / 331 of the width (x) and height (y).
  EXPECT_FLOAT_EQ(op_magnitude(MagnitudeSpace::kAutoAugment, AugmentOp::kTranslateX, 9, 10, 331, 662), 150.0);
  EXPECT_FLOAT_EQ(op_magnitude(MagnitudeSpace::kAutoAugment, AugmentOp::kTranslateY, 9, 10, 331, 662), 300.0);
  EXPECT_EQ(op_magnitude(MagnitudeSpace::kAutoAugment, AugmentOp::kEqualize, 3, 10, 224, 224), 0.0);
}

TEST(AugmentPolicyTest, ApplyOpMapsToTorchvisionsFunctionalCalls) {
  PolicyOptions bilinear;
  bilinear.interpolation = Interpolation::kBilinear;
  const PixelOp shear = augment_pixel_op({AugmentOp::kShearX, -0.3}, bilinear);
  EXPECT_EQ(shear.kind, PixelOpKind::kAffine);
  EXPECT_DOUBLE_EQ(shear.shear_x, std::atan(-0.3) * 180.0 / M_PI);
  EXPECT_EQ(shear.shear_y, 0.0);
  ASSERT_TRUE(shear.center.has_value());
  EXPECT_EQ((*shear.center)[0], 0.0);
  EXPECT_EQ(shear.interpolation, Interpolation::kBilinear);
  const PixelOp translate = augment_pixel_op({AugmentOp::kTranslateY, -12.7}, PolicyOptions{});
  EXPECT_EQ(translate.translate_y, -12.0);  // int(magnitude): toward zero
  EXPECT_FALSE(translate.center.has_value());
  EXPECT_EQ(augment_pixel_op({AugmentOp::kColor, -0.5}, PolicyOptions{}).kind, PixelOpKind::kSaturation);
  EXPECT_EQ(augment_pixel_op({AugmentOp::kColor, -0.5}, PolicyOptions{}).factor, 0.5);
  EXPECT_EQ(augment_pixel_op({AugmentOp::kPosterize, 5.0}, PolicyOptions{}).bits, 5);
  EXPECT_EQ(augment_pixel_op({AugmentOp::kRotate, 30.0}, AugMix{}.options).backend, PixelBackend::kTensor);
}

TEST(AugmentPolicyTest, TrivialAugmentWideDrawsOneOpOfFourteen) {
  const TrivialAugmentWide taw;
  std::map<AugmentOp, int> seen;
  int negative = 0, positive = 0;
  for (uint64_t i = 0; i < 14000; ++i) {
    const auto d = draws_of(taw, i);
    ASSERT_EQ(d.size(), 1u);
    ++seen[d[0].op];
    if (op_signed(d[0].op)) (d[0].magnitude < 0 ? negative : positive) += (d[0].magnitude != 0);
    if (!op_has_magnitudes(d[0].op)) EXPECT_EQ(d[0].magnitude, 0.0);
  }
  EXPECT_EQ(seen.size(), 14u);  // Invert is not among TrivialAugmentWide's ops
  EXPECT_EQ(seen.count(AugmentOp::kInvert), 0u);
  for (const auto& [op, n] : seen) EXPECT_NEAR(n, 1000, 150) << augment_op_name(op);
  EXPECT_NEAR(negative, positive, 0.1 * (negative + positive));
  // The same sample draws the same op, whatever else was drawn before.
  EXPECT_EQ(draws_of(taw, 5)[0].op, draws_of(taw, 5)[0].op);
  EXPECT_EQ(draws_of(taw, 5)[0].magnitude, draws_of(taw, 5)[0].magnitude);
}

TEST(AugmentPolicyTest, RandAugmentUsesItsOneBin) {
  RandAugment ra;
  ra.num_ops = 3;
  ra.magnitude = 4;
  for (uint64_t i = 0; i < 500; ++i) {
    const auto d = draws_of(ra, i);
    ASSERT_EQ(d.size(), 3u);
    for (const OpDraw& op : d)
      EXPECT_EQ(std::fabs(op.magnitude), std::fabs(op_magnitude(MagnitudeSpace::kRandAugment, op.op, 4, 31, 224, 224)));
  }
  ra.magnitude = 31;
  EXPECT_FALSE(validate(ra).is_ok());
  ra.magnitude = 3;
  ra.num_magnitude_bins = 1;
  EXPECT_FALSE(validate(ra).is_ok());
}

TEST(AugmentPolicyTest, AutoAugmentAppliesOnlyItsSubPolicies) {
  for (AutoAugmentPolicy policy :
       {AutoAugmentPolicy::kImageNet, AutoAugmentPolicy::kCifar10, AutoAugmentPolicy::kSvhn}) {
    AutoAugment aa;
    aa.policy = policy;
    std::set<AugmentOp> ops;
    size_t applied = 0;
    for (uint64_t i = 0; i < 3000; ++i) {
      const auto d = draws_of(aa, i);
      ASSERT_LE(d.size(), 2u);
      applied += d.size();
      for (const OpDraw& op : d) ops.insert(op.op);
    }
    EXPECT_EQ(ops.count(AugmentOp::kIdentity), 0u);
    if (policy == AutoAugmentPolicy::kImageNet) {
      // ImageNet's sub-policies use none of the translations, shears but one ShearX, brightness.
      EXPECT_EQ(ops.count(AugmentOp::kTranslateX), 0u);
      EXPECT_EQ(ops.count(AugmentOp::kBrightness), 0u);
      EXPECT_EQ(ops.count(AugmentOp::kShearX), 1u);
    }
    if (policy == AutoAugmentPolicy::kSvhn) EXPECT_EQ(ops.count(AugmentOp::kSharpness), 0u);
    EXPECT_GT(applied, 3000u);  // the mean probability is above a half
  }
  EXPECT_TRUE(parse_auto_augment_policy("cifar10").is_ok());
  EXPECT_FALSE(parse_auto_augment_policy("imagenet21k").is_ok());
}

TEST(AugmentPolicyTest, AugMixWeightsAndChains) {
  AugMix am;
  AugMixDraw d;
  double sum_original = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    SampleRng rng(3, 1, i);
    draw_augmix(am, rng, 224, 224, d);
    ASSERT_EQ(d.chain_weights.size(), 3u);
    ASSERT_EQ(d.chain_depths.size(), 3u);
    float total = d.original_weight;
    for (float w : d.chain_weights) total += w;
    EXPECT_NEAR(total, 1.0f, 1e-5f);
    sum_original += d.original_weight;
    int ops = 0;
    for (int depth : d.chain_depths) {
      EXPECT_GE(depth, 1);
      EXPECT_LE(depth, 3);
      ops += depth;
    }
    ASSERT_EQ(d.ops.size(), static_cast<size_t>(ops));
    for (const OpDraw& op : d.ops) {
      EXPECT_NE(op.op, AugmentOp::kIdentity);
      EXPECT_NE(op.op, AugmentOp::kInvert);
    }
  }
  EXPECT_NEAR(sum_original / 2000, 0.5, 0.03);  // Beta(1, 1) has mean 1/2
  am.all_ops = false;
  am.chain_depth = 2;
  for (uint64_t i = 0; i < 300; ++i) {
    SampleRng rng(3, 1, i);
    draw_augmix(am, rng, 224, 224, d);
    for (int depth : d.chain_depths) EXPECT_EQ(depth, 2);
    for (const OpDraw& op : d.ops) EXPECT_FALSE(op.op == AugmentOp::kBrightness || op.op == AugmentOp::kSharpness);
  }
  am.severity = 11;
  EXPECT_FALSE(validate(am).is_ok());
}

TEST(AugmentPolicyTest, GammaMeansMatchAlpha) {
  for (double alpha : {0.3, 1.0, 4.5}) {
    SampleRng rng(11, 0, static_cast<uint64_t>(alpha * 10));
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) sum += sample_gamma(alpha, rng);
    EXPECT_NEAR(sum / n, alpha, 0.05 * alpha + 0.02) << alpha;  // E[Gamma(alpha, 1)] = alpha
  }
}

}  // namespace
}  // namespace chute
