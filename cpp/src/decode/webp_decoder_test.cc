#include "chute/decode/webp_decoder.h"

#include <gtest/gtest.h>
#include <webp/encode.h>

#include <cstdlib>

#include "chute/decode/image_decoder.h"
#include "test_util.h"

namespace chute {
namespace {

std::vector<uint8_t> encode(const std::vector<uint8_t>& pixels, int w, int h, int channels, bool lossless) {
  uint8_t* out = nullptr;
  size_t n = 0;
  if (channels == 3) {
    n = lossless ? WebPEncodeLosslessRGB(pixels.data(), w, h, 3 * w, &out)
                 : WebPEncodeRGB(pixels.data(), w, h, 3 * w, 85, &out);
  } else {
    n = lossless ? WebPEncodeLosslessRGBA(pixels.data(), w, h, 4 * w, &out)
                 : WebPEncodeRGBA(pixels.data(), w, h, 4 * w, 85, &out);
  }
  std::vector<uint8_t> bytes(out, out + n);
  WebPFree(out);
  return bytes;
}

std::vector<uint8_t> crop(const ImageView& v, Window w) {
  std::vector<uint8_t> out;
  for (int y = 0; y < w.height; ++y) {
    const uint8_t* row = v.pixels + static_cast<size_t>(y) * v.pitch;
    out.insert(out.end(), row, row + 3 * w.width);
  }
  return out;
}

TEST(WebpDecoderTest, LosslessDecodesToTheEncodedPixelsAndDropsAlpha) {
  const int w = 37, h = 23;
  const auto rgb = testing::synthetic_rgb(w, h, 4);
  std::vector<uint8_t> rgba;
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgba.insert(rgba.end(), rgb.begin() + static_cast<long>(i), rgb.begin() + static_cast<long>(i) + 3);
    rgba.push_back(static_cast<uint8_t>(1 + i % 254));  // never 0: the encoder may change invisible pixels
  }
  WebpDecoder decoder;
  std::vector<uint8_t> buffer;
  for (const auto& file : {encode(rgb, w, h, 3, true), encode(rgba, w, h, 4, true)}) {
    auto info = decoder.read_info(file);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->width, w);
    EXPECT_EQ(info->height, h);
    auto view = decoder.decode(file, {0, 0, w, h}, buffer, 16);
    ASSERT_TRUE(view.is_ok()) << view.status().to_string();
    EXPECT_EQ(crop(*view, {0, 0, w, h}), rgb);
    EXPECT_GE(buffer.size(), static_cast<size_t>(3 * w * h + 16));
  }
}

TEST(WebpDecoderTest, AWindowIsThatPartOfTheFullDecode) {
  const int w = 64, h = 48;
  const auto file = encode(testing::synthetic_rgb(w, h, 6), w, h, 3, false);
  ImageDecoder decoder;  // through the format-detecting entry point, as the loader calls it
  std::vector<uint8_t> full_buffer, window_buffer;
  auto full = decoder.decode(file, {0, 0, w, h}, full_buffer);
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  const Window win{7, 5, 30, 21};
  auto part = decoder.decode(file, win, window_buffer);
  ASSERT_TRUE(part.is_ok()) << part.status().to_string();
  const ImageView shifted{full->pixels + win.y * full->pitch + 3 * win.x, full->pitch};
  EXPECT_EQ(crop(*part, win), crop(shifted, win));
  EXPECT_EQ(ImageDecoder::max_reduction(file), 1);
}

TEST(WebpDecoderTest, DamageAndOversizeAreErrors) {
  const int w = 64, h = 48;
  const auto file = encode(testing::synthetic_rgb(w, h, 7), w, h, 3, false);
  WebpDecoder decoder;
  std::vector<uint8_t> buffer;
  std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<long>(file.size() / 2));
  auto truncated = decoder.decode(cut, {0, 0, 8, 8}, buffer);
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorruptData) << truncated.status().to_string();
  auto big = WebpDecoder(w * h - 1).decode(file, {0, 0, 8, 8}, buffer);
  ASSERT_FALSE(big.is_ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(decoder.decode(file, {60, 0, 8, 8}, buffer).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.read_info({}).status().code(), StatusCode::kCorruptData);
  const std::vector<uint8_t> riff_only = {'R', 'I', 'F', 'F', 4, 0, 0, 0, 'W', 'E', 'B', 'P'};
  EXPECT_EQ(decoder.read_info(riff_only).status().code(), StatusCode::kCorruptData);
}

}  // namespace
}  // namespace chute
