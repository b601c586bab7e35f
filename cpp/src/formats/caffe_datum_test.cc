#include "chute/formats/caffe_datum.h"

#include <gtest/gtest.h>

#include "formats/detail/proto_writer.h"

namespace chute {
namespace {

// What convert_imageset --encoded writes: data (4), label (5), encoded (7); ReadFileToDatum sets no size.
std::vector<uint8_t> encoded_datum(const std::vector<uint8_t>& image, int64_t label) {
  std::vector<uint8_t> d;
  detail::put_bytes(d, 4, image);
  detail::put_int(d, 5, label);
  detail::put_int(d, 7, 1);
  return d;
}

TEST(CaffeDatumTest, ReadsAnEncodedDatumInPlace) {
  const std::vector<uint8_t> image = {0xff, 0xd8, 0xff, 0xe0, 9, 9, 9};
  const auto value = encoded_datum(image, 42);
  auto d = parse_datum(value);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_TRUE(d->encoded);
  EXPECT_TRUE(d->has_label);
  EXPECT_EQ(d->label, 42);
  EXPECT_EQ(std::vector<uint8_t>(d->data.begin(), d->data.end()), image);
  EXPECT_EQ(d->data.data(), value.data() + 2);  // after the tag and the length
}

TEST(CaffeDatumTest, RawPixelDatumsAndNegativeLabels) {
  std::vector<uint8_t> v;
  detail::put_int(v, 1, 3);
  detail::put_int(v, 2, 2);
  detail::put_int(v, 3, 2);
  detail::put_bytes(v, 4, std::vector<uint8_t>(12, 7));
  detail::put_int(v, 5, -1);  // an int32 -1: ten bytes of varint
  auto d = parse_datum(v);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_FALSE(d->encoded);
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->label, -1);
}

TEST(CaffeDatumTest, OtherBytesAreNotADatum) {
  const auto value = encoded_datum({1, 2, 3, 4}, 5);
  for (size_t cut = 1; cut < 6; ++cut) EXPECT_FALSE(parse_datum(std::span(value).first(cut)).is_ok()) << cut;
  std::vector<uint8_t> other;
  detail::put_int(other, 9, 1);  // a field Datum does not have
  EXPECT_FALSE(parse_datum(other).is_ok());
  const std::vector<uint8_t> jpeg = {0xff, 0xd8, 0xff, 0xe0, 0, 16};
  EXPECT_FALSE(parse_datum(jpeg).is_ok());
}

}  // namespace
}  // namespace chute
