// The pixel stage inside a Pipeline: where augmentations may sit, where the flip happens, the erasings'
// draws and the writer's erase.
#include "chute/transform/pixel_stage.h"

#include <gtest/gtest.h>

#include "chute/transform/output.h"
#include "chute/transform/transforms.h"
#include "test_util.h"

namespace chute {
namespace {

TEST(PixelStageTest, AugmentationsFollowTheGeometryAndPrecedeErasing) {
  EXPECT_EQ(Pipeline::create({TrivialAugmentWide{}, RandomResizedCrop{}}).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(Pipeline::create({Resize{256}, AutoAugment{}, CenterCrop{224, 224}}).status().code(),
            StatusCode::kUnsupported);
  EXPECT_FALSE(Pipeline::create({RandomResizedCrop{}, Normalize{}, TrivialAugmentWide{}}).is_ok());
  EXPECT_EQ(Pipeline::create({RandomResizedCrop{}, RandomErasing{}, TrivialAugmentWide{}}).status().code(),
            StatusCode::kUnsupported);
  EXPECT_TRUE(Pipeline::create({RandomResizedCrop{}, TrivialAugmentWide{}, Normalize{}, RandomErasing{}}).is_ok());
  EXPECT_TRUE(Pipeline::create({RandomResizedCrop{}, RandomErasing{}, Normalize{}}).is_ok());
  EXPECT_FALSE(Pipeline::create({RandomResizedCrop{}, RandAugment{.magnitude = 40}}).is_ok());
  // A blur kernel whose reflection padding exceeds the output.
  EXPECT_FALSE(
      Pipeline::create({RandomResizedCrop{16, 16}, GaussianBlur{.kernel_width = 33, .kernel_height = 33}}).is_ok());
  EXPECT_TRUE(
      Pipeline::create({RandomResizedCrop{16, 16}, GaussianBlur{.kernel_width = 31, .kernel_height = 3}}).is_ok());
}

TEST(PixelStageTest, TheFlipMovesBeforeTheAugmentationsThatFollowIt) {
  auto p1 = Pipeline::create({RandomResizedCrop{}, RandomHorizontalFlip{}});
  ASSERT_TRUE(p1.is_ok());
  EXPECT_FALSE(p1->augments());
  EXPECT_TRUE(p1->writer_flips());
  auto p2 = Pipeline::create({RandomResizedCrop{}, RandomHorizontalFlip{}, TrivialAugmentWide{}});
  ASSERT_TRUE(p2.is_ok());
  EXPECT_TRUE(p2->augments());
  EXPECT_FALSE(p2->writer_flips());
  auto p3 = Pipeline::create({RandomResizedCrop{}, TrivialAugmentWide{}, RandomHorizontalFlip{}});
  ASSERT_TRUE(p3.is_ok());
  EXPECT_TRUE(p3->writer_flips());
  // Erasing alone needs no pixel stage: the writer still flips.
  auto p4 = Pipeline::create({RandomResizedCrop{}, RandomHorizontalFlip{}, RandomErasing{}});
  ASSERT_TRUE(p4.is_ok());
  EXPECT_TRUE(p4->augments());
  EXPECT_TRUE(p4->writer_flips());
}

TEST(PixelStageTest, FlipHappensWhereTheListPutsIt) {
  // A quarter turn after the flip differs from one before it: the stage must flip first.
  const int n = 6;
  auto pipeline = Pipeline::create({Resize{n, n}, RandomHorizontalFlip{1.0}, RandomRotation{.degrees = {90.0, 90.0}}});
  ASSERT_TRUE(pipeline.is_ok());
  const std::vector<uint8_t> img = testing::synthetic_rgb(n, n, 4);
  SampleRng rng(1, 0, 0);
  auto plan = pipeline->plan(n, n, rng);
  ASSERT_TRUE(plan.is_ok());
  ASSERT_TRUE(plan->flip);
  AugmentDraws draws;
  pipeline->draw_augment(rng, draws);
  AugmentScratch scratch;
  std::vector<uint8_t> out = img;
  pipeline->augment(draws, plan->flip, out, scratch);

  PixelScratch ps;
  PixelOp flip, turn;
  flip.kind = PixelOpKind::kHorizontalFlip;
  turn.kind = PixelOpKind::kRotate;
  turn.angle = 90.0;
  std::vector<uint8_t> flipped_then_turned = img;
  apply_pixel_op(flip, flipped_then_turned, n, n, ps);
  apply_pixel_op(turn, flipped_then_turned, n, n, ps);
  std::vector<uint8_t> turned_then_flipped = img;
  apply_pixel_op(turn, turned_then_flipped, n, n, ps);
  apply_pixel_op(flip, turned_then_flipped, n, n, ps);
  EXPECT_EQ(out, flipped_then_turned);
  EXPECT_NE(out, turned_then_flipped);
}

TEST(PixelStageTest, DrawsAreTheSampleRngs) {
  auto pipeline = Pipeline::create({RandomResizedCrop{}, RandomHorizontalFlip{}, TrivialAugmentWide{},
                                    ColorJitter{.brightness = Range{0.6, 1.4}, .hue = Range{-0.1, 0.1}}, AugMix{},
                                    Normalize{}, RandomErasing{.p = 1.0}});
  ASSERT_TRUE(pipeline.is_ok());
  const auto draw = [&](uint64_t index) {
    SampleRng rng(9, 2, index);
    EXPECT_TRUE(pipeline->plan(500, 375, rng).is_ok());
    AugmentDraws d;
    pipeline->draw_augment(rng, d);
    return d;
  };
  const AugmentDraws a = draw(17), b = draw(17), c = draw(18);
  ASSERT_EQ(a.steps.size(), 4u);  // flip, TrivialAugmentWide, ColorJitter, AugMix
  EXPECT_TRUE(a.steps[0].flip);
  EXPECT_EQ(a.steps[2].end - a.steps[2].begin, 2u);  // brightness and hue, in a random order
  EXPECT_EQ(a.steps[3].augmix, 0);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(a.ops[i].kind, b.ops[i].kind);
    EXPECT_EQ(a.ops[i].factor, b.ops[i].factor);
  }
  ASSERT_EQ(a.erasing.size(), 1u);
  const ErasingDraw& e = a.erasing[0];
  if (e.erase) {
    EXPECT_EQ(e.top, b.erasing[0].top);
    EXPECT_LT(e.height, 224);
    EXPECT_LE(e.top + e.height, 224);
    EXPECT_LE(e.left + e.width, 224);
  }
  EXPECT_FALSE(a.augmix[0].chain_weights == c.augmix[0].chain_weights && a.erasing[0].top == c.erasing[0].top);
}

TEST(PixelStageTest, ErasingDrawsFollowTorchvision) {
  RandomErasing t;
  t.p = 1.0;
  int erased = 0;
  double area = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    SampleRng rng(5, 0, i);
    const ErasingDraw d = draw_erasing(t, rng, 224, 224);
    if (!d.erase) continue;
    ++erased;
    ASSERT_LT(d.height, 224);
    ASSERT_LT(d.width, 224);
    ASSERT_GE(d.top, 0);
    ASSERT_LE(d.left + d.width, 224);
    area += static_cast<double>(d.height) * d.width / (224.0 * 224.0);
  }
  EXPECT_GT(erased, 3900);  // ten tries almost always fit a box of at most a third of the area
  EXPECT_NEAR(area / erased, (0.02 + 0.33) / 2, 0.02);
  t.p = 0.0;
  SampleRng rng(5, 0, 0);
  EXPECT_FALSE(draw_erasing(t, rng, 224, 224).erase);
}

TEST(PixelStageTest, WriterErasesInTheOutputsUnits) {
  const int h = 4, w = 5;
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(w, h, 2);
  const Normalize norm{{0.5f, 0.25f, 0.f}, {2.f, 4.f, 1.f}};
  RandomErasing t;
  t.value = {1.f, 0.5f, 0.f};
  ErasingDraw d;
  d.erase = true;
  d.top = 1, d.left = 2, d.height = 2, d.width = 3;
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    auto writer = OutputWriter::create(h, w, {DType::kFloat32, layout}, norm);
    ASSERT_TRUE(writer.is_ok());
    std::vector<float> out(static_cast<size_t>(h) * w * 3);
    writer->write(rgb.data(), false, out.data());
    const std::vector<float> before = out;
    ErasingValues values(t, d);
    writer->erase(out.data(), d, values, &norm);  // an erasing before Normalize: (v - mean) / std
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const size_t i = layout == Layout::kNCHW ? (c * h + y) * w + x : (y * w + x) * 3 + c;
          const bool inside = y >= 1 && y < 3 && x >= 2 && x < 5;
          const float expect = inside ? (t.value[c] - norm.mean[c]) / norm.std[c] : before[i];
          ASSERT_EQ(out[i], expect) << c << "," << y << "," << x;
        }
  }
  // uint8 output: levels, clamped.
  auto u8 = OutputWriter::create(h, w, {DType::kUInt8, Layout::kNCHW}, std::nullopt);
  ASSERT_TRUE(u8.is_ok());
  std::vector<uint8_t> out(static_cast<size_t>(h) * w * 3);
  t.value = {300.f, 7.9f, -3.f};
  ErasingValues values(t, d);
  u8->erase(out.data(), d, values, nullptr);
  EXPECT_EQ(out[1 * w + 2], 255);
  EXPECT_EQ(out[h * w + 1 * w + 2], 7);
  EXPECT_EQ(out[2 * h * w + 1 * w + 2], 0);
  // 'random': standard normals, the same for the same draw.
  t.random = true;
  d.values_key = 42;
  ErasingValues r1(t, d), r2(t, d);
  double sum = 0, sum2 = 0;
  for (int i = 0; i < 20000; ++i) {
    const float v = r1.next(0);
    ASSERT_EQ(v, r2.next(0));
    sum += v;
    sum2 += v * v;
  }
  EXPECT_NEAR(sum / 20000, 0.0, 0.03);
  EXPECT_NEAR(sum2 / 20000, 1.0, 0.05);
}

}  // namespace
}  // namespace chute
