#include "chute/decode/jpeg_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "test_util.h"

namespace chute {
namespace {

using testing::EncodeOptions;

struct Kind {
  const char* name;
  EncodeOptions opts;
};
const Kind kKinds[] = {
    {"444", {92, 1, 1, false, false}}, {"422", {92, 2, 1, false, false}},           {"420", {92, 2, 2, false, false}},
    {"gray", {92, 1, 1, true, false}}, {"progressive420", {92, 2, 2, false, true}},
};

// The window's pixels, tightly packed.
std::vector<uint8_t> pack(const JpegDecoder::View& v, Window w) {
  std::vector<uint8_t> out(static_cast<size_t>(w.width) * w.height * 3);
  for (int y = 0; y < w.height; ++y)
    std::memcpy(&out[static_cast<size_t>(y) * w.width * 3], v.pixels + y * v.pitch, static_cast<size_t>(w.width) * 3);
  return out;
}

Window random_window(std::mt19937& gen, int width, int height) {
  Window w;
  w.x = std::uniform_int_distribution<int>(0, width - 1)(gen);
  w.y = std::uniform_int_distribution<int>(0, height - 1)(gen);
  w.width = std::uniform_int_distribution<int>(1, width - w.x)(gen);
  w.height = std::uniform_int_distribution<int>(1, height - w.y)(gen);
  return w;
}

std::vector<uint8_t> crop(const std::vector<uint8_t>& rgb, int width, Window w) {
  std::vector<uint8_t> out(static_cast<size_t>(w.width) * w.height * 3);
  for (int y = 0; y < w.height; ++y)
    std::memcpy(&out[static_cast<size_t>(y) * w.width * 3], &rgb[(static_cast<size_t>(w.y + y) * width + w.x) * 3],
                static_cast<size_t>(w.width) * 3);
  return out;
}

TEST(JpegDecoderTest, CropOnDecodeMatchesFullDecodeForEveryKind) {
  const int width = 203, height = 157;  // not multiples of the MCU size
  const auto rgb = testing::synthetic_rgb(width, height, 5);
  JpegDecoder decoder;
  std::mt19937 gen(1);
  for (const Kind& kind : kKinds) {
    SCOPED_TRACE(kind.name);
    const auto jpeg = testing::encode_jpeg(rgb, width, height, kind.opts);
    int rw = 0, rh = 0;
    const auto full = testing::reference_decode(jpeg, &rw, &rh);
    auto info = decoder.read_info(jpeg);
    ASSERT_TRUE(info.is_ok());
    EXPECT_EQ(info->width, width);
    EXPECT_EQ(info->height, height);
    EXPECT_EQ(info->progressive, kind.opts.progressive);
    std::vector<Window> windows{{0, 0, width, height}, {0, 0, 1, 1}, {width - 1, height - 1, 1, 1}};
    for (int i = 0; i < 40; ++i) windows.push_back(random_window(gen, width, height));
    for (const Window& w : windows) {
      std::vector<uint8_t> buffer;
      auto view = decoder.decode(jpeg, w, buffer);
      ASSERT_TRUE(view.is_ok());
      ASSERT_EQ(pack(*view, w), crop(full, width, w))
          << "window " << w.x << "," << w.y << " " << w.width << "x" << w.height;
    }
  }
}

TEST(JpegDecoderTest, ScaledDecodeWindowsMatchTheWholeScaledImage) {
  const int width = 203, height = 157;
  const auto rgb = testing::synthetic_rgb(width, height, 9);
  JpegDecoder decoder;
  std::mt19937 gen(2);
  for (const Kind& kind : kKinds) {
    SCOPED_TRACE(kind.name);
    const auto jpeg = testing::encode_jpeg(rgb, width, height, kind.opts);
    for (int d : {2, 4, 8}) {
      const int rw = (width + d - 1) / d, rh = (height + d - 1) / d;  // libjpeg rounds up
      std::vector<uint8_t> buffer;
      auto whole = decoder.decode(jpeg, {0, 0, rw, rh}, buffer, 0, d);
      ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
      const auto full = pack(*whole, {0, 0, rw, rh});
      EXPECT_EQ(decoder.decode(jpeg, {0, 0, rw + 1, rh}, buffer, 0, d).status().code(), StatusCode::kInvalidArgument);
      for (int i = 0; i < 15; ++i) {
        const Window w = random_window(gen, rw, rh);
        auto view = decoder.decode(jpeg, w, buffer, 0, d);
        ASSERT_TRUE(view.is_ok());
        ASSERT_EQ(pack(*view, w), crop(full, rw, w)) << "reduction " << d;
      }
    }
  }
}

TEST(JpegDecoderTest, BadInputsAreErrorsNotCrashes) {
  const auto rgb = testing::synthetic_rgb(64, 48, 2);
  const auto jpeg = testing::encode_jpeg(rgb, 64, 48);
  JpegDecoder decoder;
  std::vector<uint8_t> out;
  const Window all{0, 0, 64, 48};

  EXPECT_EQ(decoder.decode({}, all, out).status().code(), StatusCode::kCorruptData);  // empty
  const std::vector<uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
  EXPECT_EQ(decoder.decode(png, all, out).status().code(), StatusCode::kUnsupported);  // not a JPEG

  // Truncated anywhere: never a gray-filled success.
  for (size_t cut : {size_t{3}, size_t{20}, jpeg.size() / 3, jpeg.size() / 2, jpeg.size() - 2}) {
    std::vector<uint8_t> part(jpeg.begin(), jpeg.begin() + cut);
    EXPECT_EQ(decoder.decode(part, all, out).status().code(), StatusCode::kCorruptData) << "cut " << cut;
  }
  // Flipped bytes in the entropy-coded data: an error or a clean decode, never a crash.
  std::mt19937 gen(3);
  for (int i = 0; i < 200; ++i) {
    auto bad = jpeg;
    for (int j = 0; j < 4; ++j) bad[std::uniform_int_distribution<size_t>(2, bad.size() - 3)(gen)] ^= 0x5A;
    (void)decoder.decode(bad, all, out);
  }
  // The decoder still works after all that.
  EXPECT_TRUE(decoder.decode(jpeg, all, out).is_ok());
  // A window outside the image is refused.
  EXPECT_EQ(decoder.decode(jpeg, {60, 0, 10, 10}, out).status().code(), StatusCode::kInvalidArgument);
}

TEST(JpegDecoderTest, AcceptTruncationFillsTheRestGrayLikePilsLoadTruncatedImages) {
  const auto rgb = testing::synthetic_rgb(64, 48, 5);
  const auto jpeg = testing::encode_jpeg(rgb, 64, 48);
  const Window all{0, 0, 64, 48};
  std::vector<uint8_t> full, out;
  JpegDecoder decoder;
  ASSERT_TRUE(decoder.decode(jpeg, all, full).is_ok());
  const std::vector<uint8_t> half(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  const std::vector<uint8_t> header(jpeg.begin(), jpeg.begin() + 20);
  EXPECT_EQ(decoder.decode(half, all, out).status().code(), StatusCode::kCorruptData);  // off by default
  decoder.set_accept_truncation(true);
  auto view = decoder.decode(half, all, out);
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  // The first MCU row is the file's, the last one gray (what libjpeg fills in, and PIL shows).
  EXPECT_TRUE(std::equal(full.begin(), full.begin() + 64 * 3 * 8, view->pixels));
  const uint8_t* last = view->pixels + view->pitch * 40;
  EXPECT_TRUE(std::all_of(last, last + 64 * 3 * 8, [](uint8_t v) { return v == 128; }));
  EXPECT_EQ(decoder.decode(header, all, out).status().code(), StatusCode::kCorruptData);  // no image at all
  EXPECT_TRUE(decoder.decode(jpeg, all, out).is_ok());                                    // and whole files as before
  decoder.set_accept_truncation(false);
  EXPECT_EQ(decoder.decode(half, all, out).status().code(), StatusCode::kCorruptData);
}

TEST(JpegDecoderTest, CmykAndYcckBecomeRgbLikePillow) {
  // A flat CMYK colour (stored values, Adobe-inverted as Photoshop writes them): Pillow reads C' = 255 - c
  // etc. and computes R = clip(K'' - C'K''/255) with K'' = 255 - K' = k.
  const int w = 32, h = 16;
  const uint8_t stored[4] = {200, 120, 40, 180};
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = stored[i % 4];
  JpegDecoder decoder;
  for (bool ycck : {false, true}) {
    SCOPED_TRACE(ycck ? "YCCK" : "CMYK");
    const auto jpeg = testing::encode_jpeg_cmyk(cmyk, w, h, ycck);
    auto info = decoder.read_info(jpeg);
    ASSERT_TRUE(info.is_ok());
    EXPECT_EQ(info->components, 4);
    std::vector<uint8_t> buffer;
    auto view = decoder.decode(jpeg, {3, 2, 20, 10}, buffer);
    ASSERT_TRUE(view.is_ok()) << view.status().to_string();
    for (int c = 0; c < 3; ++c) {
      const int nk = stored[3];
      const int tmp = (255 - stored[c]) * nk + 128;
      const int expected = nk - (((tmp >> 8) + tmp) >> 8);
      EXPECT_NEAR(view->pixels[5 * view->pitch + 7 * 3 + c], expected, 2) << "channel " << c;  // lossy codec
    }
  }
}

TEST(JpegDecoderTest, PixelLimitGuardsAgainstBombs) {
  const auto jpeg = testing::encode_jpeg(testing::synthetic_rgb(64, 48, 2), 64, 48);
  JpegDecoder decoder(/*max_pixels=*/1000);
  std::vector<uint8_t> out(64 * 48 * 3);
  EXPECT_EQ(decoder.decode(jpeg, {0, 0, 64, 48}, out).status().code(), StatusCode::kResourceExhausted);
}

// Junk between two markers, as in many ImageNet files: libjpeg warns "extraneous bytes before marker".
std::vector<uint8_t> with_extraneous_bytes(std::vector<uint8_t> jpeg) {
  // After SOI comes APP0 (JFIF): its length is at bytes 4-5; junk goes right after the segment.
  const size_t app0_end = 4 + ((jpeg[4] << 8) | jpeg[5]);
  jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(app0_end), {0x12, 0x34, 0x56});
  return jpeg;
}

TEST(JpegDecoderTest, ExtraneousBytesAreABenignWarning) {
  const auto jpeg = with_extraneous_bytes(testing::encode_jpeg(testing::synthetic_rgb(64, 48, 2), 64, 48));
  JpegDecoder decoder;
  std::vector<uint8_t> out;
  auto view = decoder.decode(jpeg, {0, 0, 64, 48}, out);
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  EXPECT_EQ(decoder.benign_warnings(), 1);
}

}  // namespace
}  // namespace chute
