#include "chute/formats/tfrecord.h"

#include <gtest/gtest.h>

#include <cstring>

#include "chute/formats/crc32c.h"
#include "chute/formats/tf_example.h"
#include "formats/detail/proto_writer.h"

namespace chute {
namespace {

using detail::ExampleWriter;

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

void append_record(std::vector<uint8_t>& file, const std::vector<uint8_t>& data) {
  uint8_t header[12];
  const uint64_t n = data.size();
  std::memcpy(header, &n, 8);
  const uint32_t length_crc = mask_crc32c(crc32c({header, 8})), data_crc = mask_crc32c(crc32c(data));
  std::memcpy(header + 8, &length_crc, 4);
  file.insert(file.end(), header, header + 12);
  file.insert(file.end(), data.begin(), data.end());
  const auto* c = reinterpret_cast<const uint8_t*>(&data_crc);
  file.insert(file.end(), c, c + 4);
}

TEST(TfRecordTest, ScansEveryRecordOfAFile) {
  std::vector<uint8_t> file;
  append_record(file, bytes_of("first"));
  append_record(file, {});
  append_record(file, bytes_of("third record"));
  auto records = scan_tfrecord(file, "x.tfrecord");
  ASSERT_TRUE(records.is_ok()) << records.status().to_string();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].offset, 12u);
  EXPECT_EQ((*records)[0].size, 5u);
  EXPECT_EQ((*records)[1].size, 0u);
  EXPECT_EQ((*records)[2].offset, 12u + 5 + 4 + 12 + 0 + 4 + 12);
  for (const TfRecord& r : *records)
    EXPECT_TRUE(check_tfrecord_crc(std::span(file).subspan(r.offset, r.size + 4)).is_ok());
  EXPECT_TRUE(scan_tfrecord({}, "empty").is_ok());
}

TEST(TfRecordTest, TruncationAndBadCrcsNameTheRecordAndOffset) {
  std::vector<uint8_t> file;
  append_record(file, bytes_of("first"));
  append_record(file, bytes_of("second"));
  for (size_t cut = 1; cut < file.size(); ++cut) {
    if (cut == 21) continue;  // exactly the first record: a whole file
    auto r = scan_tfrecord(std::span(file).first(cut), "x.tfrecord");
    ASSERT_FALSE(r.is_ok()) << cut;
    EXPECT_NE(r.status().message().find("x.tfrecord: record "), std::string::npos) << r.status().message();
  }
  auto bad_length = file;
  bad_length[21] ^= 1;  // the second record's length
  auto r = scan_tfrecord(bad_length, "x.tfrecord");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("record 1 at offset 21: the length's CRC does not match"), std::string::npos)
      << r.status().message();
  auto bad_data = file;
  bad_data[13] ^= 1;  // a byte of the first record's data: the framing still scans, the data CRC fails
  ASSERT_TRUE(scan_tfrecord(bad_data, "x").is_ok());
  EXPECT_EQ(check_tfrecord_crc(std::span(bad_data).subspan(12, 9)).code(), StatusCode::kCorruptData);
}

TEST(TfRecordTest, GzipIsRefusedWithWhatToDo) {
  const std::vector<uint8_t> gz = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
  auto r = scan_tfrecord(gz, "x.tfrecord.gz");
  ASSERT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("GZIP"), std::string::npos);
  const std::vector<uint8_t> zlib = {0x78, 0x9c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_NE(scan_tfrecord(zlib, "z").status().message().find("ZLIB"), std::string::npos);
}

TEST(TfExampleTest, ParsesFeaturesOfEachKind) {
  const std::vector<uint8_t> image = {0xff, 0xd8, 0xff, 1, 2, 3};
  ExampleWriter w;
  w.bytes("image/encoded", image).int64("image/class/label", 17).int64("image/height", 300, false);
  std::vector<uint8_t> floats = {0x0a, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};  // FloatList{value: [1, 2]} packed
  w.entry("bbox", [&] {
    std::vector<uint8_t> f;
    detail::put_bytes(f, 2, floats);
    return f;
  }());
  w.entry("empty", {});
  const std::vector<uint8_t> example = w.done();
  auto features = parse_example(example);
  ASSERT_TRUE(features.is_ok()) << features.status().to_string();
  ASSERT_EQ(features->size(), 5u);
  const ExampleFeature* img = find_feature(*features, "image/encoded");
  ASSERT_NE(img, nullptr);
  EXPECT_EQ(img->kind, FeatureKind::kBytes);
  EXPECT_EQ(std::vector<uint8_t>(img->first_bytes.begin(), img->first_bytes.end()), image);
  EXPECT_GE(img->first_bytes.data(), example.data());  // in place
  EXPECT_EQ(find_feature(*features, "image/class/label")->first_int, 17);
  EXPECT_EQ(find_feature(*features, "image/height")->first_int, 300);
  EXPECT_EQ(find_feature(*features, "bbox")->kind, FeatureKind::kFloat);
  EXPECT_EQ(find_feature(*features, "bbox")->count, 2u);
  EXPECT_EQ(find_feature(*features, "empty")->kind, FeatureKind::kNone);
  EXPECT_EQ(find_feature(*features, "label"), nullptr);
}

TEST(TfExampleTest, NegativeLabelsAndRepeatedKeysReadAsProtobufDoes) {
  ExampleWriter w;
  w.int64("label", 3).int64("label", -1);  // a map key given twice: the last value
  auto features = parse_example(w.done());
  ASSERT_TRUE(features.is_ok());
  ASSERT_EQ(features->size(), 1u);
  EXPECT_EQ((*features)[0].first_int, -1);
}

TEST(TfExampleTest, MalformedBytesAreErrorsAtEveryCut) {
  ExampleWriter w;
  w.bytes("image", {1, 2, 3, 4, 5, 6, 7, 8}).int64("label", 300);
  const std::vector<uint8_t> example = w.done();
  for (size_t cut = 1; cut < example.size(); ++cut) {
    auto r = parse_example(std::span(example).first(cut));
    EXPECT_FALSE(r.is_ok()) << cut;  // every prefix cuts a length-delimited field short
  }
  EXPECT_FALSE(parse_example(bytes_of("\x0b\x0c")).is_ok());  // a group
}

}  // namespace
}  // namespace chute
