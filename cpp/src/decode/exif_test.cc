#include "chute/decode/exif.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace chute {
namespace {

// A JPEG with an APP1 Exif segment holding one IFD entry: Orientation = `orientation`.
std::vector<uint8_t> with_exif(const std::vector<uint8_t>& jpeg, int orientation, bool little_endian) {
  std::vector<uint8_t> tiff;
  auto put16 = [&](uint32_t v) {
    tiff.push_back(uint8_t(little_endian ? v : v >> 8));
    tiff.push_back(uint8_t(little_endian ? v >> 8 : v));
  };
  auto put32 = [&](uint32_t v) {
    if (little_endian)
      put16(v & 0xFFFF), put16(v >> 16);
    else
      put16(v >> 16), put16(v & 0xFFFF);
  };
  tiff.push_back(little_endian ? 'I' : 'M');
  tiff.push_back(little_endian ? 'I' : 'M');
  put16(42);
  put32(8);
  put16(2);  // two entries: a decoy, then Orientation
  put16(0x010F), put16(2), put32(4), put32(0);
  put16(0x0112), put16(3), put32(1), put16(orientation), put16(0);
  put32(0);
  std::vector<uint8_t> app1{0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const size_t len = app1.size() - 2;
  app1[2] = uint8_t(len >> 8), app1[3] = uint8_t(len);
  std::vector<uint8_t> out;
  out.reserve(2 + app1.size() + jpeg.size());
  out.push_back(0xFF);
  out.push_back(0xD8);
  out.insert(out.end(), app1.begin(), app1.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

TEST(ExifTest, ReadsOrientationInBothByteOrders) {
  const auto jpeg = testing::encode_jpeg(testing::synthetic_rgb(16, 8, 1), 16, 8);
  EXPECT_EQ(jpeg_exif_orientation(jpeg), 1);
  for (int o = 1; o <= 8; ++o) {
    EXPECT_EQ(jpeg_exif_orientation(with_exif(jpeg, o, true)), o);
    EXPECT_EQ(jpeg_exif_orientation(with_exif(jpeg, o, false)), o);
  }
  EXPECT_EQ(jpeg_exif_orientation(with_exif(jpeg, 9, true)), 1);  // out of range
}

TEST(ExifTest, HostileSegmentsNeverReadOutOfBounds) {
  const auto good = with_exif(testing::encode_jpeg(testing::synthetic_rgb(16, 8, 1), 16, 8), 6, true);
  std::mt19937 gen(5);
  for (size_t cut = 0; cut < 80; ++cut) {  // every truncation of the header region
    std::vector<uint8_t> part(good.begin(), good.begin() + std::min(cut, good.size()));
    const int o = jpeg_exif_orientation(part);
    EXPECT_TRUE(o >= 1 && o <= 8);
  }
  for (int i = 0; i < 2000; ++i) {  // flipped bytes in the Exif segment (run under ASan in CI)
    auto bad = good;
    for (int j = 0; j < 3; ++j) bad[std::uniform_int_distribution<size_t>(2, 60)(gen)] = uint8_t(gen());
    const int o = jpeg_exif_orientation(bad);
    EXPECT_TRUE(o >= 1 && o <= 8);
  }
}

TEST(ExifTest, WindowsOfTheDisplayedImageMatchTheWholeImageTurned) {
  const int w = 13, h = 7;
  const auto rgb = testing::synthetic_rgb(w, h, 3);
  for (int o = 1; o <= 8; ++o) {
    SCOPED_TRACE(o);
    const bool swap = orientation_swaps_axes(o);
    const int dw = swap ? h : w, dh = swap ? w : h;
    std::vector<uint8_t> whole(static_cast<size_t>(dw) * dh * 3);
    reorient(rgb.data(), w * 3, {0, 0, dw, dh}, o, w, h, whole.data());
    for (Window d : {Window{0, 0, dw, dh}, Window{1, 2, 3, 4}, Window{dw - 2, dh - 3, 2, 3}}) {
      const Window s = stored_window(d, o, w, h);
      ASSERT_TRUE(s.x >= 0 && s.y >= 0 && s.x + s.width <= w && s.y + s.height <= h);
      ASSERT_EQ(static_cast<int64_t>(s.width) * s.height, static_cast<int64_t>(d.width) * d.height);
      std::vector<uint8_t> part(static_cast<size_t>(d.width) * d.height * 3);
      reorient(rgb.data() + (static_cast<size_t>(s.y) * w + s.x) * 3, w * 3, d, o, w, h, part.data());
      for (int y = 0; y < d.height; ++y)
        for (int x = 0; x < d.width * 3; ++x)
          ASSERT_EQ(part[y * d.width * 3 + x], whole[(static_cast<size_t>(d.y + y) * dw + d.x) * 3 + x]);
    }
  }
}

}  // namespace
}  // namespace chute
