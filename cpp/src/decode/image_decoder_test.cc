#include "chute/decode/image_decoder.h"

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace chute {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// A JPEG whose entropy-coded data loses its last fifth, the end-of-image marker kept.
std::vector<uint8_t> cut_near_the_bottom(int width, int height) {
  std::vector<uint8_t> jpeg = testing::encode_jpeg(testing::synthetic_rgb(width, height, 5), width, height);
  size_t sos = 0;
  while (!(jpeg[sos] == 0xFF && jpeg[sos + 1] == 0xDA)) ++sos;
  const size_t scan = sos + 2 + (size_t{jpeg[sos + 2]} << 8 | jpeg[sos + 3]);
  size_t cut = jpeg.size() - 2 - (jpeg.size() - 2 - scan) / 5;
  while (jpeg[cut - 1] == 0xFF) --cut;
  jpeg.resize(cut);
  jpeg.push_back(0xFF);
  jpeg.push_back(0xD9);
  return jpeg;
}

TEST(ImageDecoderTest, CheckRefusesWhatDecodeRefuses) {
  ImageDecoder decoder;
  std::vector<uint8_t> pixels;
  for (const std::string& junk : {std::string("this is text\n"), std::string("BM\x36\0\0\0", 6),
                                  std::string("GIF89a\1\0\1\0", 10), std::string("II*\0\x08\0\0\0", 8)}) {
    for (ImageCheck level : {ImageCheck::kHeader, ImageCheck::kFull}) {
      const Status st = decoder.check(bytes_of(junk), level, pixels);
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << junk << ": " << st.to_string();
    }
  }
  EXPECT_EQ(decoder.check({}, ImageCheck::kHeader, pixels).code(), StatusCode::kCorruptData);
  EXPECT_TRUE(decoder.check(bytes_of("junk"), ImageCheck::kNone, pixels).is_ok());
}

TEST(ImageDecoderTest, CheckHeaderAppliesThePixelCap) {
  const auto jpeg = testing::encode_jpeg(testing::synthetic_rgb(40, 30, 1), 40, 30);
  std::vector<uint8_t> pixels;
  EXPECT_TRUE(ImageDecoder(1200).check(jpeg, ImageCheck::kHeader, pixels).is_ok());
  const Status st = ImageDecoder(1199).check(jpeg, ImageCheck::kHeader, pixels);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("max_pixels"), std::string::npos) << st.message();
}

TEST(ImageDecoderTest, CheckFullFindsDamageThatATopWindowNeverReaches) {
  const auto jpeg = cut_near_the_bottom(64, 512);
  ImageDecoder decoder;
  std::vector<uint8_t> pixels;
  EXPECT_TRUE(decoder.check(jpeg, ImageCheck::kHeader, pixels).is_ok());
  EXPECT_TRUE(decoder.decode(jpeg, Window{0, 0, 64, 64}, pixels).is_ok());  // the rows a top crop reads
  const Status st = decoder.check(jpeg, ImageCheck::kFull, pixels);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData) << st.to_string();
  const auto good = testing::encode_jpeg(testing::synthetic_rgb(64, 512, 5), 64, 512);
  EXPECT_TRUE(decoder.check(good, ImageCheck::kFull, pixels).is_ok());
}

}  // namespace
}  // namespace chute
