#include "chute/transform/resample.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "test_util.h"

namespace chute {
namespace {

std::vector<uint8_t> run(std::vector<uint8_t> in, int w, int h, int ow, int oh) {
  in.resize(in.size() + kResampleInputPadding);
  AxisCoeffs xs = AxisCoeffs::bilinear(w, ow, 0, ow), ys = AxisCoeffs::bilinear(h, oh, 0, oh);
  std::vector<uint8_t> out(static_cast<size_t>(ow) * oh * 3);
  ResampleScratch scratch;
  resample_rgb(in.data(), static_cast<size_t>(w) * 3, xs, ys, out.data(), scratch);
  return out;
}

TEST(ResampleTest, CoefficientsFollowPillow) {
  // Halving: support 2, taps 5; output 0 centred at 1.0 reads inputs 0..2 with weights 0.75/0.25 style
  // triangle (normalised), so its weights sum to 1 in fixed point.
  const AxisCoeffs c = AxisCoeffs::bilinear(10, 5, 0, 5);
  EXPECT_EQ(c.taps, 5);
  for (int i = 0; i < 5; ++i) {
    int64_t sum = 0;
    for (int t = 0; t < c.count[i]; ++t) sum += c.weights[i * c.taps + t];
    EXPECT_NEAR(sum, 1 << AxisCoeffs::kPrecisionBits, 4);
  }
  EXPECT_EQ(c.first[0], 0);
  EXPECT_EQ(c.count[0], 3);  // xmin = int(1 - 2 + 0.5) -> 0, xmax = int(1 + 2 + 0.5) = 3
  EXPECT_EQ(c.first[4], 7);  // centre 9: int(9 - 2 + 0.5) = 7
  EXPECT_EQ(c.count[4], 3);  // clipped at 10
}

TEST(ResampleTest, ConstantImageStaysConstant) {
  std::vector<uint8_t> in(37 * 23 * 3);
  for (size_t i = 0; i < in.size(); i += 3) in[i] = 10, in[i + 1] = 128, in[i + 2] = 250;
  for (auto [ow, oh] : {std::pair{12, 9}, std::pair{80, 50}, std::pair{37, 11}, std::pair{5, 23}}) {
    const auto out = run(in, 37, 23, ow, oh);
    for (size_t i = 0; i < out.size(); i += 3) {
      ASSERT_EQ(out[i], 10);
      ASSERT_EQ(out[i + 1], 128);
      ASSERT_EQ(out[i + 2], 250);
    }
  }
}

TEST(ResampleTest, SameSizeIsACopyAndKeptRangeIsASubset) {
  const auto in = testing::synthetic_rgb(40, 30, 1);
  EXPECT_EQ(run(in, 40, 30, 40, 30), in);
  // Resizing to 20x15 and keeping outputs [5, 15) x [3, 12) equals the middle of the full resize.
  const auto full = run(in, 40, 30, 20, 15);
  AxisCoeffs xs = AxisCoeffs::bilinear(40, 20, 5, 10), ys = AxisCoeffs::bilinear(30, 15, 3, 9);
  const int x0 = xs.input_begin(), y0 = ys.input_begin();
  xs.rebase(x0);
  ys.rebase(y0);
  std::vector<uint8_t> part(10 * 9 * 3);
  auto padded = in;
  padded.resize(in.size() + kResampleInputPadding);
  ResampleScratch scratch;
  resample_rgb(padded.data() + (static_cast<size_t>(y0) * 40 + x0) * 3, 40 * 3, xs, ys, part.data(), scratch);
  for (int y = 0; y < 9; ++y)
    for (int x = 0; x < 10 * 3; ++x) ASSERT_EQ(part[y * 30 + x], full[(y + 3) * 60 + 15 + x]);
}

// Every SIMD kernel this CPU runs against the portable one, on random sizes from 4x shrinks (where the
// AVX-512 horizontal pass hands over to AVX2) to 300x enlargements, and on narrow outputs (one group).
TEST(ResampleTest, SimdKernelsMatchPortableKernelsExactly) {
  std::vector<const char*> simd;
  for (const char* k : {"avx2", "avx512"})
    if (use_resample_kernels(k)) simd.push_back(k);
  ASSERT_TRUE(use_resample_kernels(""));
  if (simd.empty()) GTEST_SKIP() << "no SIMD kernels on this CPU";
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> dim(1, 300);
  for (int i = 0; i < 80; ++i) {
    const int w = dim(gen), h = dim(gen), ow = i % 4 == 0 ? 1 + dim(gen) % 20 : dim(gen), oh = dim(gen);
    std::vector<uint8_t> in(static_cast<size_t>(w) * h * 3);
    for (auto& v : in) v = static_cast<uint8_t>(gen());
    ASSERT_TRUE(use_resample_kernels("portable"));
    const auto portable = run(in, w, h, ow, oh);
    for (const char* k : simd) {
      ASSERT_TRUE(use_resample_kernels(k));
      ASSERT_EQ(run(in, w, h, ow, oh), portable) << k << ": " << w << "x" << h << " -> " << ow << "x" << oh;
    }
  }
  ASSERT_TRUE(use_resample_kernels(""));
}

// Restores the process-wide pass order when a test ends.
struct PassOrderScope {
  ResamplePassOrder saved = resample_pass_order();
  explicit PassOrderScope(ResamplePassOrder order) { set_resample_pass_order(order); }
  ~PassOrderScope() { set_resample_pass_order(saved); }
};

// Pillow 13 resizes columns first when the height loses more than twice the pixels the width does; each
// pass rounds to uint8, so the result is a vertical-only resize followed by a horizontal-only one. Pillow
// up to 12 is the other composition. Checked for every kernel, with a crop of the output (the fused
// Resize + CenterCrop) too.
TEST(ResampleTest, PassOrderFollowsPillow13ForTallShrinks) {
  std::vector<const char*> kernels = {"portable"};
  for (const char* k : {"avx2", "avx512"})
    if (use_resample_kernels(k)) kernels.push_back(k);
  const int w = 180, h = 700, ow = 150, oh = 60;  // dy = 640 > 2 * dx = 60: columns first under Pillow 13
  const auto in = testing::synthetic_rgb(w, h, 5);
  ASSERT_TRUE(use_resample_kernels("portable"));
  const auto columns_first = run(run(in, w, h, w, oh), w, oh, ow, oh);
  const auto rows_first = run(run(in, w, h, ow, h), ow, h, ow, oh);
  ASSERT_NE(columns_first, rows_first);  // the rounding between the passes shows
  for (const char* k : kernels) {
    ASSERT_TRUE(use_resample_kernels(k));
    {
      PassOrderScope order(ResamplePassOrder::kPillow13);
      EXPECT_EQ(run(in, w, h, ow, oh), columns_first) << k;
      // A wide shrink keeps rows first under Pillow 13 too: dy = 10 is not > 2 * dx.
      EXPECT_EQ(run(in, w, h, 100, h - 10), run(run(in, w, h, 100, h), 100, h, 100, h - 10)) << k;
      // Outputs [5, 125) x [7, 47) of the resize: the same pixels as the middle of the full one.
      AxisCoeffs xs = AxisCoeffs::bilinear(w, ow, 5, 120), ys = AxisCoeffs::bilinear(h, oh, 7, 40);
      ASSERT_TRUE(resample_vertical_first(xs, ys));
      const int x0 = xs.input_begin(), y0 = ys.input_begin();
      xs.rebase(x0);
      ys.rebase(y0);
      auto padded = in;
      padded.resize(in.size() + kResampleInputPadding);
      std::vector<uint8_t> part(120 * 40 * 3);
      ResampleScratch scratch;
      resample_rgb(padded.data() + (static_cast<size_t>(y0) * w + x0) * 3, w * 3, xs, ys, part.data(), scratch);
      for (int y = 0; y < 40; ++y)
        for (int x = 0; x < 120 * 3; ++x)
          ASSERT_EQ(part[y * 360 + x], columns_first[(y + 7) * ow * 3 + 15 + x]) << k << " " << x << "," << y;
    }
    PassOrderScope order(ResamplePassOrder::kHorizontalFirst);
    EXPECT_EQ(run(in, w, h, ow, oh), rows_first) << k;
  }
  ASSERT_TRUE(use_resample_kernels(""));
}

TEST(ResampleTest, KernelSelectionRejectsUnknownNames) {
  EXPECT_FALSE(use_resample_kernels("sse9"));
  EXPECT_TRUE(use_resample_kernels("portable"));
  EXPECT_STREQ(resample_kernels(), "portable");
  EXPECT_TRUE(use_resample_kernels(""));
  EXPECT_STRNE(resample_kernels(), "");
}

}  // namespace
}  // namespace chute
