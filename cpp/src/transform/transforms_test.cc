#include "chute/transform/transforms.h"

#include <gtest/gtest.h>

namespace chute {
namespace {

TEST(RandomResizedCropTest, WindowsLieInsideAndRespectRanges) {
  RandomResizedCrop t;
  for (uint64_t i = 0; i < 2000; ++i) {
    SampleRng rng(0, 0, i);
    const CropBox b = random_resized_crop_box(500, 375, t, rng);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 500);
    ASSERT_LE(b.y + b.height, 375);
    const double area = static_cast<double>(b.width) * b.height / (500.0 * 375);
    ASSERT_GE(area, 0.079);
    ASSERT_LE(area, 1.0);
  }
}

TEST(RandomResizedCropTest, FallbackIsCentreCropClampedToRatio) {
  // A 1000x10 strip: no try can fit a ratio in [3/4, 4/3] of 8-100% area, so torchvision's fallback
  // takes h = 10, w = round(10 * 4/3) = 13, centred.
  RandomResizedCrop t;
  SampleRng rng(0, 0, 0);
  const CropBox b = random_resized_crop_box(1000, 10, t, rng);
  EXPECT_EQ(b.height, 10);
  EXPECT_EQ(b.width, 13);
  EXPECT_EQ(b.x, (1000 - 13) / 2);
  EXPECT_EQ(b.y, 0);
}

TEST(PipelineTest, ReductionLeavesTheResizeAtLeastTheReducingGap) {
  // 2048x1536 -> Resize(256): 341x256 from the whole image, a shrink of 6 on both axes. Pillow's
  // factor int(6 / gap), rounded down to what libjpeg scales by (8, 4, 2), on both axes.
  auto p = Pipeline::create({Resize{256}, CenterCrop{224, 224}});
  ASSERT_TRUE(p.is_ok());
  const auto reduction = [&](int max_reduction, double gap, int width = 2048, int height = 1536) {
    SampleRng rng(0, 0, 0);
    auto plan = p->plan(width, height, rng, max_reduction, gap);
    EXPECT_TRUE(plan.is_ok());
    return plan->reduction;
  };
  EXPECT_EQ(reduction(8, 1.0), 4);   // 6 / 1 = 6: 4 (the old scaled_decode)
  EXPECT_EQ(reduction(8, 1.5), 4);   // 6 / 1.5 = 4: exactly 4 is allowed (remaining shrink 1.5)
  EXPECT_EQ(reduction(8, 1.51), 2);  // just above: 2
  EXPECT_EQ(reduction(8, 3.0), 2);   // 6 / 3 = 2
  EXPECT_EQ(reduction(8, 3.01), 1);  // below 2: no reduction
  EXPECT_EQ(reduction(1, 1.0), 1);   // a decoder that cannot scale (PNG, WebP, or decode='exact')
  EXPECT_EQ(reduction(2, 1.0), 2);
  // Both axes must allow it: 4096x1536 becomes int(256 * 4096 / 1536) = 682 x 256, a shrink of 6.006
  // across and 6 down: d = 2 at gap 3, either way round.
  EXPECT_EQ(reduction(8, 3.0, 4096, 1536), 2);
  EXPECT_EQ(reduction(8, 3.0, 1536, 4096), 2);
  // A CenterCrop alone resizes nothing: never reduced.
  auto crop = Pipeline::create({CenterCrop{224, 224}});
  ASSERT_TRUE(crop.is_ok());
  SampleRng rng(0, 0, 0);
  EXPECT_EQ(crop->plan(4000, 3000, rng, 8, 1.0)->reduction, 1);
}

TEST(PipelineTest, RejectsListsWithoutOneOutputSize) {
  EXPECT_FALSE(Pipeline::create({Resize{256}}).is_ok());
  EXPECT_FALSE(Pipeline::create({RandomResizedCrop{}, Resize{256, 256}}).is_ok());
  EXPECT_FALSE(Pipeline::create({Normalize{}, CenterCrop{10, 10}}).is_ok());
  EXPECT_FALSE(Pipeline::create({RandomResizedCrop{0, 0}}).is_ok());
  EXPECT_TRUE(Pipeline::create({Resize{256}, CenterCrop{224, 224}, Normalize{}}).is_ok());
}

TEST(PipelineTest, ResizeThenCenterCropPlansTorchvisionGeometry) {
  auto p = Pipeline::create({Resize{256}, CenterCrop{224, 224}});
  ASSERT_TRUE(p.is_ok());
  SampleRng rng(0, 0, 0);
  // 500x375 -> Resize(256) gives 341x256 (int(256 * 500 / 375) = 341); the crop keeps x in
  // [round(58.5) = 58, 282) and y in [16, 240).
  auto plan = p->plan(500, 375, rng);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->xs.out_size, 224);
  EXPECT_EQ(plan->ys.out_size, 224);
  EXPECT_FALSE(plan->flip);
  // The decoded window covers exactly the inputs those outputs read.
  const AxisCoeffs full_x = AxisCoeffs::bilinear(500, 341, 58, 224);
  EXPECT_EQ(plan->window_x, full_x.input_begin());
  EXPECT_EQ(plan->window_width, full_x.input_end() - full_x.input_begin());
  const AxisCoeffs full_y = AxisCoeffs::bilinear(375, 256, 16, 224);
  EXPECT_EQ(plan->window_y, full_y.input_begin());
}

TEST(PipelineTest, CenterCropLargerThanImagePadsLikeTorchvision) {
  // torchvision: pad (crop - size) // 2 before and the rest after, then crop at round((size - crop) / 2).
  auto p = Pipeline::create({CenterCrop{224, 224}});
  ASSERT_TRUE(p.is_ok());
  SampleRng rng(0, 0, 0);
  auto plan = p->plan(101, 300, rng);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->pad_left, 61);
  EXPECT_EQ(plan->pad_right, 62);
  EXPECT_EQ(plan->pad_top, 0);
  EXPECT_EQ(plan->pad_bottom, 0);
  EXPECT_EQ(plan->xs.out_size, 101);
  EXPECT_EQ(plan->ys.out_size, 224);
  EXPECT_EQ(plan->window_x, 0);
  EXPECT_EQ(plan->window_width, 101);
  EXPECT_EQ(plan->window_y, 38);
  EXPECT_EQ(plan->window_height, 224);
  // Both axes short: the image sits in the middle of the zeros.
  auto both = p->plan(20, 11, rng);
  ASSERT_TRUE(both.is_ok());
  EXPECT_EQ(both->pad_left, 102);
  EXPECT_EQ(both->pad_right, 102);
  EXPECT_EQ(both->pad_top, 106);
  EXPECT_EQ(both->pad_bottom, 107);
  // After a resize, the padding is in the resized image's pixels.
  auto after = Pipeline::create({Resize{32, 48}, CenterCrop{40, 40}});
  ASSERT_TRUE(after.is_ok());
  auto r = after->plan(500, 400, rng);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->pad_top, 4);
  EXPECT_EQ(r->pad_bottom, 4);
  EXPECT_EQ(r->pad_left, 0);
  EXPECT_EQ(r->xs.out_size, 40);
}

TEST(PipelineTest, ResizeAfterAPaddingCenterCropIsUnsupported) {
  auto p = Pipeline::create({CenterCrop{224, 224}, Resize{64, 64}});
  ASSERT_TRUE(p.is_ok());
  SampleRng rng(0, 0, 0);
  EXPECT_TRUE(p->plan(300, 300, rng).is_ok());
  EXPECT_EQ(p->plan(100, 300, rng).status().code(), StatusCode::kUnsupported);
}

TEST(PipelineTest, FlipProbabilityIsHonoured) {
  auto never = Pipeline::create({CenterCrop{8, 8}, RandomHorizontalFlip{0.0}});
  auto always = Pipeline::create({CenterCrop{8, 8}, RandomHorizontalFlip{1.0}});
  auto half = Pipeline::create({CenterCrop{8, 8}, RandomHorizontalFlip{0.5}});
  int flips = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    SampleRng a(0, 0, i), b(0, 0, i), c(0, 0, i);
    EXPECT_FALSE(never->plan(16, 16, a)->flip);
    EXPECT_TRUE(always->plan(16, 16, b)->flip);
    flips += half->plan(16, 16, c)->flip;
  }
  EXPECT_NEAR(flips, 500, 60);
}

}  // namespace
}  // namespace chute
