#include "chute/decode/raw_image.h"

#include <gtest/gtest.h>

#include <cstring>

#include "chute/decode/image_decoder.h"
#include "chute/pack/jpeg_encoder.h"
#include "chute/pack/pack_transform.h"
#include "test_util.h"

namespace chute {
namespace {

std::vector<uint8_t> encode(const std::vector<uint8_t>& rgb, int w, int h, RawCompression c, int orientation = 1) {
  std::vector<uint8_t> out;
  EXPECT_TRUE(encode_raw_image(rgb.data(), static_cast<size_t>(w) * 3, w, h, c, orientation, out).is_ok());
  return out;
}

TEST(RawImageTest, WindowsAreTheStoredPixels) {
  const int w = 37, h = 29;
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(w, h, 7);
  for (RawCompression c : {RawCompression::kNone, RawCompression::kZstd}) {
    const std::vector<uint8_t> raw = encode(rgb, w, h, c);
    ImageDecoder decoder;
    ASSERT_EQ(detect_format(raw), ImageFormat::kRaw);
    Result<ImageInfo> info = decoder.read_info(raw);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info.value().width, w);
    EXPECT_EQ(info.value().height, h);
    for (Window win : {Window{0, 0, w, h}, Window{5, 3, 11, 7}, Window{w - 1, h - 1, 1, 1}, Window{0, 10, w, 19}}) {
      std::vector<uint8_t> buffer;
      Result<ImageView> v = decoder.decode(raw, win, buffer, kResampleInputPadding);
      ASSERT_TRUE(v.is_ok()) << v.status().to_string();
      for (int y = 0; y < win.height; ++y)
        ASSERT_EQ(std::memcmp(v.value().pixels + y * v.value().pitch, rgb.data() + ((win.y + y) * w + win.x) * 3,
                              static_cast<size_t>(win.width) * 3),
                  0)
            << "row " << y;
    }
  }
}

TEST(RawImageTest, ZstdCompressesAndKeepsOrientation) {
  const int w = 64, h = 48;
  const std::vector<uint8_t> flat(static_cast<size_t>(w) * h * 3, 100);
  const std::vector<uint8_t> raw = encode(flat, w, h, RawCompression::kZstd, 6);
  EXPECT_LT(raw.size(), flat.size() / 10);
  EXPECT_EQ(ImageDecoder::orientation(raw), 6);
  EXPECT_EQ(original_kind(raw), RecordKind::kRawZstd);
  EXPECT_EQ(original_kind(encode(flat, w, h, RawCompression::kNone)), RecordKind::kRaw);
}

TEST(RawImageTest, CorruptRecordsAreNamedErrors) {
  const int w = 40, h = 30;
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(w, h, 3);
  ImageDecoder decoder;
  std::vector<uint8_t> buffer;
  auto decode_error = [&](const std::vector<uint8_t>& bytes) {
    Result<ImageInfo> info = decoder.read_info(bytes);
    if (!info.is_ok()) return info.status();
    Result<ImageView> v = decoder.decode(bytes, Window{0, 0, w, h}, buffer);
    return v.is_ok() ? Status::ok() : v.status();
  };
  std::vector<uint8_t> raw = encode(rgb, w, h, RawCompression::kNone);
  std::vector<uint8_t> short_raw(raw.begin(), raw.end() - 3);
  Status st = decode_error(short_raw);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  EXPECT_NE(st.message().find("expected 3600"), std::string::npos) << st.message();

  std::vector<uint8_t> z = encode(rgb, w, h, RawCompression::kZstd);
  std::vector<uint8_t> truncated(z.begin(), z.end() - 20);
  st = decode_error(truncated);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData) << st.to_string();
  EXPECT_NE(st.message().find("raw image"), std::string::npos) << st.message();

  // Garbled from the frame header on (its reserved bit set among others). Damage inside a stored block
  // alone is pixels zstd cannot tell apart: the packed record's checksum catches that.
  std::vector<uint8_t> garbled = z;
  for (size_t i = kRawHeaderSize + 4; i < garbled.size(); ++i) garbled[i] ^= 0x5A;
  st = decode_error(garbled);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData) << st.to_string();

  std::vector<uint8_t> wrong_size = z;
  wrong_size[8] = static_cast<uint8_t>(w + 1);  // the header's width no longer matches its pixel bytes
  st = decode_error(wrong_size);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  EXPECT_NE(st.message().find("pixel bytes"), std::string::npos) << st.message();

  std::vector<uint8_t> header_only(z.begin(), z.begin() + 20);
  EXPECT_EQ(decode_error(header_only).code(), StatusCode::kCorruptData);

  ImageDecoder small(100);
  EXPECT_EQ(small.read_info(z).status().code(), StatusCode::kResourceExhausted);
}

TEST(PackTransformTest, CappedSizeRoundsAsTorchvisionResize) {
  StoreOptions o;
  int w = 0, h = 0;
  o.max_side = 256;
  capped_size(1000, 750, o, &w, &h);  // int(256 * 750 / 1000) = 192
  EXPECT_EQ(w, 256);
  EXPECT_EQ(h, 192);
  capped_size(333, 1000, o, &w, &h);  // int(256 * 333 / 1000) = 85 (85.248)
  EXPECT_EQ(w, 85);
  EXPECT_EQ(h, 256);
  capped_size(200, 100, o, &w, &h);  // within the cap: unchanged, never enlarged
  EXPECT_EQ(w, 200);
  EXPECT_EQ(h, 100);
  capped_size(5000, 3, o, &w, &h);
  EXPECT_EQ(h, 1);
  o = StoreOptions{.max_shorter_side = 256};
  capped_size(1000, 750, o, &w, &h);  // int(256 * 1000 / 750) = 341
  EXPECT_EQ(w, 341);
  EXPECT_EQ(h, 256);
  EXPECT_FALSE((StoreOptions{.max_side = 1, .max_shorter_side = 1}).validate().is_ok());
  EXPECT_FALSE((StoreOptions{.quality = 0}).validate().is_ok());
}

TEST(PackTransformTest, ReencodesOnlyWhatTheCapChanges) {
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(300, 200, 1);
  const std::vector<uint8_t> jpeg = testing::encode_jpeg(rgb, 300, 200);
  RecordTransformer t;
  std::vector<uint8_t> out;
  IndexEntry e;
  StoreOptions keep{.max_side = 300};
  Result<bool> r = t.transform(jpeg, keep, out, &e);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r.value());
  EXPECT_EQ(e.kind, RecordKind::kJpeg);
  StoreOptions cap{.max_side = 150, .quality = 95, .subsampling = ChromaSubsampling::k444};
  r = t.transform(jpeg, cap, out, &e);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value());
  EXPECT_EQ(e.kind, RecordKind::kReencodedJpeg);
  EXPECT_EQ(e.width, 150u);
  EXPECT_EQ(e.height, 100u);
  ImageDecoder d;
  ASSERT_EQ(d.read_info(out).value().width, 150);
  StoreOptions raw{.max_side = 150, .raw_below = 150 * 100 + 1};
  r = t.transform(jpeg, raw, out, &e);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(e.kind, RecordKind::kRawZstd);
  StoreOptions not_below{.max_side = 150, .raw_below = 150 * 100};  // fewer pixels than, not as many
  r = t.transform(jpeg, not_below, out, &e);
  EXPECT_EQ(e.kind, RecordKind::kReencodedJpeg);
}

TEST(JpegEncoderTest, WritesTheOrientationItIsGiven) {
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(32, 16, 2);
  JpegEncoder enc;
  std::vector<uint8_t> out;
  ASSERT_TRUE(enc.encode(rgb.data(), 96, 32, 16, 90, ChromaSubsampling::k420, 6, out).is_ok());
  EXPECT_EQ(ImageDecoder::orientation(out), 6);
  int w = 0, h = 0;
  const std::vector<uint8_t> back = testing::reference_decode(out, &w, &h);
  EXPECT_EQ(w, 32);
  EXPECT_EQ(h, 16);
  EXPECT_FALSE(enc.encode(rgb.data(), 96, 32, 16, 101, ChromaSubsampling::k420, 1, out).is_ok());
}

}  // namespace
}  // namespace chute
