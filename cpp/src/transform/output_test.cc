#include "chute/transform/output.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace chute {
namespace {

// The value torchvision's ToTensor + Normalize give a pixel level, in float32.
float expected(uint8_t v, float mean, float std) { return (static_cast<float>(v) / 255.f - mean) / std; }

struct Image {
  int h, w;
  std::vector<uint8_t> rgb;
};

Image random_image(std::mt19937& gen, int h, int w) {
  Image im{h, w, std::vector<uint8_t>(static_cast<size_t>(h) * w * 3)};
  for (auto& v : im.rgb) v = static_cast<uint8_t>(gen());
  return im;
}

// Widths around the 16-pixel blocks of the vectorised writes, both flips, every pixel level.
TEST(OutputWriterTest, UInt8AndFloat32MatchTheDefinitionInBothLayouts) {
  std::mt19937 gen(3);
  const Normalize norm{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
  for (int w : {1, 5, 15, 16, 17, 31, 32, 33, 224}) {
    const int h = w == 224 ? 7 : 3;
    const Image im = random_image(gen, h, w);
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      for (bool flip : {false, true}) {
        auto u8 = OutputWriter::create(h, w, {DType::kUInt8, layout}, std::nullopt);
        auto f32 = OutputWriter::create(h, w, {DType::kFloat32, layout}, norm);
        ASSERT_TRUE(u8.is_ok() && f32.is_ok());
        std::vector<uint8_t> out8(u8->sample_bytes());
        std::vector<float> out32(f32->sample_bytes() / sizeof(float));
        u8->write(im.rgb.data(), flip, out8.data());
        f32->write(im.rgb.data(), flip, out32.data());
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            for (int c = 0; c < 3; ++c) {
              const uint8_t v = im.rgb[(static_cast<size_t>(y) * w + (flip ? w - 1 - x : x)) * 3 + c];
              const size_t at = layout == Layout::kNCHW ? (static_cast<size_t>(c) * h + y) * w + x
                                                        : (static_cast<size_t>(y) * w + x) * 3 + c;
              ASSERT_EQ(out8[at], v) << "w=" << w << " flip=" << flip << " x=" << x << " c=" << c;
              const float want = expected(v, norm.mean[c], norm.std[c]);
              ASSERT_EQ(std::memcmp(&out32[at], &want, sizeof(float)), 0)
                  << "w=" << w << " flip=" << flip << " x=" << x << " c=" << c << ": " << out32[at] << " vs " << want;
            }
      }
    }
  }
}

// Every level of every channel, without normalisation: ToTensor's v / 255.
TEST(OutputWriterTest, Float32WithoutNormalizeIsToTensor) {
  Image im{1, 256, std::vector<uint8_t>(256 * 3)};
  for (int x = 0; x < 256; ++x)
    for (int c = 0; c < 3; ++c) im.rgb[x * 3 + c] = static_cast<uint8_t>(x);
  auto f32 = OutputWriter::create(1, 256, {DType::kFloat32, Layout::kNCHW}, std::nullopt);
  ASSERT_TRUE(f32.is_ok());
  std::vector<float> out(256 * 3);
  f32->write(im.rgb.data(), false, out.data());
  for (int c = 0; c < 3; ++c)
    for (int x = 0; x < 256; ++x) ASSERT_EQ(out[c * 256 + x], static_cast<float>(x) / 255.f) << x;
}

TEST(OutputWriterTest, UInt8RefusesNormalize) {
  EXPECT_FALSE(OutputWriter::create(2, 2, {DType::kUInt8, Layout::kNCHW}, Normalize{}).is_ok());
}

TEST(OutputWriterTest, SizesWhoseBytesOverflowAreErrorsNotTinyBuffers) {
  // 2**31 - 1 squared times 3 channels times 4 bytes is over 2**64: a wrapped size would under-allocate.
  auto huge = OutputWriter::create(2147483647, 2147483647, {DType::kFloat32, Layout::kNCHW}, std::nullopt);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos) << huge.status().message();
  EXPECT_FALSE(OutputWriter::create(0, 8, {DType::kUInt8, Layout::kNCHW}, std::nullopt).is_ok());
  EXPECT_TRUE(OutputWriter::create(65536, 65536, {DType::kFloat32, Layout::kNCHW}, std::nullopt).is_ok());
}

}  // namespace
}  // namespace chute
