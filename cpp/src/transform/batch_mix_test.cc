#include "chute/transform/batch_mix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace chute {
namespace {

BatchShape shape(int64_t batch, int height, int width, DType dtype = DType::kFloat32, Layout layout = Layout::kNCHW) {
  return {.batch = batch, .height = height, .width = width, .format = {.dtype = dtype, .layout = layout}};
}

std::vector<float> random_batch(const BatchShape& s, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(s.batch) * s.height * s.width * 3);
  for (float& x : v) x = dist(gen);
  return v;
}

// torchvision's x.roll(1, 0).mul_(1 - lam).add_(x.mul(lam)), written out: each product and the sum rounded
// to float32 on its own (volatile keeps a compiler from fusing them).
std::vector<float> torchvision_mixup(const std::vector<float>& x, int64_t batch, double lam) {
  const size_t per = x.size() / static_cast<size_t>(batch);
  const float a = static_cast<float>(1.0 - lam), b = static_cast<float>(lam);
  std::vector<float> out(x.size());
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t prev = (i + batch - 1) % batch;
    for (size_t v = 0; v < per; ++v) {
      volatile float rolled = x[prev * per + v] * a;
      volatile float own = x[i * per + v] * b;
      out[i * per + v] = rolled + own;
    }
  }
  return out;
}

TEST(BatchMixTest, MixUpIsTorchvisionsArithmeticForAnySplitIntoParts) {
  const BatchShape s = shape(5, 4, 6);
  const std::vector<float> x = random_batch(s, 1);
  for (double lam : {0.0, 0.3, 0.71234567, 1.0}) {
    const std::vector<float> expected = torchvision_mixup(x, s.batch, lam);
    for (int parts : {1, 3, 7}) {
      std::vector<float> got = x;
      const MixParams p{.kind = MixParams::Kind::kMixUp, .lam = lam, .label_lam = lam};
      for (int part = 0; part < parts; ++part) apply_batch_mix(p, s, got.data(), part, parts);
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
          << "lam " << lam << ", " << parts << " parts";
    }
  }
}

TEST(BatchMixTest, MixUpOfOneSampleMixesItWithItself) {
  const BatchShape s = shape(1, 2, 3);
  const std::vector<float> x = random_batch(s, 2);
  std::vector<float> got = x;
  apply_batch_mix({.kind = MixParams::Kind::kMixUp, .lam = 0.4, .label_lam = 0.4}, s, got.data());
  EXPECT_EQ(got, torchvision_mixup(x, 1, 0.4));
}

template <class T>
void check_cutmix(Layout layout, DType dtype) {
  const BatchShape s = shape(4, 5, 7, dtype, layout);
  const size_t per = static_cast<size_t>(s.height) * s.width * 3;
  std::vector<T> x(per * s.batch);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<T>(k % 251);
  const MixParams p{.kind = MixParams::Kind::kCutMix, .lam = 0.5, .x1 = 2, .y1 = 1, .x2 = 6, .y2 = 4};
  auto value = [&](const std::vector<T>& b, int64_t i, int c, int y, int xx) {
    const size_t at = layout == Layout::kNCHW ? (static_cast<size_t>(c) * s.height + y) * s.width + xx
                                              : (static_cast<size_t>(y) * s.width + xx) * 3 + c;
    return b[i * per + at];
  };
  for (int parts : {1, 2, 5, 40}) {
    std::vector<T> got = x;
    for (int part = 0; part < parts; ++part) apply_batch_mix(p, s, got.data(), part, parts);
    for (int64_t i = 0; i < s.batch; ++i)
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < s.height; ++y)
          for (int xx = 0; xx < s.width; ++xx) {
            const bool in_box = xx >= p.x1 && xx < p.x2 && y >= p.y1 && y < p.y2;
            const int64_t from = in_box ? (i + s.batch - 1) % s.batch : i;  // rolled by one in the box
            ASSERT_EQ(value(got, i, c, y, xx), value(x, from, c, y, xx))
                << "sample " << i << " c " << c << " y " << y << " x " << xx << ", " << parts << " parts";
          }
  }
}

TEST(BatchMixTest, CutMixTakesTheBoxFromThePreviousSampleInEveryLayoutAndDtype) {
  check_cutmix<float>(Layout::kNCHW, DType::kFloat32);
  check_cutmix<float>(Layout::kNHWC, DType::kFloat32);
  check_cutmix<uint8_t>(Layout::kNCHW, DType::kUInt8);
  check_cutmix<uint8_t>(Layout::kNHWC, DType::kUInt8);
}

TEST(BatchMixTest, CreateChecksItsArguments) {
  EXPECT_FALSE(BatchMix::create({}).is_ok());
  EXPECT_FALSE(BatchMix::create({MixUp{0.0}}).is_ok());
  EXPECT_FALSE(BatchMix::create({MixUp{NAN}}).is_ok());
  EXPECT_FALSE(BatchMix::create({MixUp{1.0}, CutMix{1.0}}, {1.0}).is_ok());
  EXPECT_FALSE(BatchMix::create({MixUp{1.0}, CutMix{1.0}}, {0.0, 0.0}).is_ok());
  EXPECT_FALSE(BatchMix::create({MixUp{1.0}, CutMix{1.0}}, {-1.0, 2.0}).is_ok());
  auto m = BatchMix::create({MixUp{0.2}, CutMix{1.0}}, {1.0, 3.0});
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->p(), (std::vector<double>{0.25, 0.75}));             // normalised, as torchvision's RandomChoice does
  EXPECT_FALSE(m->check_format({.dtype = DType::kUInt8}).is_ok());  // torchvision's MixUp refuses uint8
  EXPECT_TRUE(BatchMix::create({CutMix{1.0}})->check_format({.dtype = DType::kUInt8}).is_ok());
}

TEST(BatchMixTest, DrawsAreKeyedBySeedEpochAndBatch) {
  auto m = BatchMix::create({MixUp{0.2}, CutMix{1.0}});
  ASSERT_TRUE(m.is_ok());
  auto same = [](const MixParams& a, const MixParams& b) {
    return a.kind == b.kind && a.lam == b.lam && a.x1 == b.x1 && a.y1 == b.y1 && a.x2 == b.x2 && a.y2 == b.y2;
  };
  const MixParams a = m->draw({.seed = 7, .epoch = 2}, 64, 224, 224);
  EXPECT_TRUE(same(a, m->draw({.seed = 7, .epoch = 2}, 64, 224, 224)));
  EXPECT_FALSE(same(a, m->draw({.seed = 8, .epoch = 2}, 64, 224, 224)));
  EXPECT_FALSE(same(a, m->draw({.seed = 7, .epoch = 3}, 64, 224, 224)));
  EXPECT_FALSE(same(a, m->draw({.seed = 7, .epoch = 2}, 128, 224, 224)));
}

// Beta(alpha, alpha) has mean 1/2 and variance 1 / (4 (2 alpha + 1)); RandomChoice picks op i with p_i;
// CutMix's box follows from lam and a uniform centre, and its label weight is 1 - box area / image area.
TEST(BatchMixTest, DrawsFollowTorchvisionsDistributions) {
  for (double alpha : {0.2, 1.0, 4.0}) {
    auto m = BatchMix::create({MixUp{alpha}, CutMix{alpha}}, {0.3, 0.7});
    ASSERT_TRUE(m.is_ok());
    constexpr int kDraws = 40000;
    const int h = 32, w = 48;
    double sum = 0, sum_sq = 0, centre_x = 0;
    int cutmix = 0;
    for (int k = 0; k < kDraws; ++k) {
      const MixParams p = m->draw({.seed = 11, .epoch = 0}, static_cast<uint64_t>(k), h, w);
      ASSERT_GE(p.lam, 0.0);
      ASSERT_LE(p.lam, 1.0);
      ASSERT_EQ(p.lam, static_cast<double>(static_cast<float>(p.lam)));  // a float32 draw, as torch's
      sum += p.lam;
      sum_sq += p.lam * p.lam;
      if (p.kind == MixParams::Kind::kCutMix) {
        ++cutmix;
        ASSERT_TRUE(p.x1 >= 0 && p.x1 <= p.x2 && p.x2 <= w && p.y1 >= 0 && p.y1 <= p.y2 && p.y2 <= h);
        const double r = 0.5 * std::sqrt(1.0 - p.lam);
        ASSERT_LE(p.x2 - p.x1, 2 * static_cast<int>(r * w));
        ASSERT_LE(p.y2 - p.y1, 2 * static_cast<int>(r * h));
        EXPECT_EQ(p.label_lam, 1.0 - static_cast<double>(p.x2 - p.x1) * (p.y2 - p.y1) / (h * w));
        centre_x += (p.x1 + p.x2) / 2.0;
      } else {
        EXPECT_EQ(p.label_lam, p.lam);
      }
    }
    const double mean = sum / kDraws, var = sum_sq / kDraws - mean * mean;
    const double expected_var = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    const double se_mean = std::sqrt(expected_var / kDraws);
    EXPECT_NEAR(mean, 0.5, 5 * se_mean) << "alpha " << alpha;
    EXPECT_NEAR(var, expected_var, 0.05 * expected_var) << "alpha " << alpha;
    EXPECT_NEAR(cutmix / static_cast<double>(kDraws), 0.7, 5 * std::sqrt(0.21 / kDraws)) << "alpha " << alpha;
    EXPECT_NEAR(centre_x / cutmix, (w - 1) / 2.0, 1.0) << "alpha " << alpha;  // clipping is symmetric
  }
}

}  // namespace
}  // namespace chute
