#include "chute/formats/parquet_pages.h"

#include <gtest/gtest.h>

#include <string>

namespace chute {
namespace {

// A Thrift compact-protocol PageHeader, written as parquet-cpp writes one: fields in order, short deltas.
void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<uint8_t>(v | 0x80));
  out.push_back(static_cast<uint8_t>(v));
}
void put_i32(std::vector<uint8_t>& out, int delta, int32_t v) {
  out.push_back(static_cast<uint8_t>(delta << 4 | 5));
  put_varint(out, (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31));
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

struct Page {
  int32_t type = 0;  // 0: v1 data page, 2: dictionary, 3: v2 data page
  int32_t encoding = 0;
  int32_t num_values = 0;
  std::vector<uint8_t> levels;  // the RLE / bit-packed hybrid bytes, without a length
  std::vector<std::string> values;
  int32_t stored_size = -1;  // the compressed size the header claims (-1: the page's)
};

std::vector<uint8_t> page(const Page& p) {
  std::vector<uint8_t> body;
  if (p.type == 0) put_u32(body, static_cast<uint32_t>(p.levels.size()));
  body.insert(body.end(), p.levels.begin(), p.levels.end());
  for (const std::string& v : p.values) {
    put_u32(body, static_cast<uint32_t>(v.size()));
    body.insert(body.end(), v.begin(), v.end());
  }
  std::vector<uint8_t> out;
  const auto size = static_cast<int32_t>(body.size());
  put_i32(out, 1, p.type);
  put_i32(out, 1, size);
  put_i32(out, 1, p.stored_size < 0 ? size : p.stored_size);
  if (p.type == 3) {
    out.push_back(5 << 4 | 12);  // field 8, a struct
    put_i32(out, 1, p.num_values);
    put_i32(out, 1, 0);  // num_nulls
    put_i32(out, 1, p.num_values);
    put_i32(out, 1, p.encoding);
    put_i32(out, 1, static_cast<int32_t>(p.levels.size()));
    put_i32(out, 1, 0);         // repetition levels' bytes
    out.push_back(1 << 4 | 2);  // is_compressed = false
  } else {
    out.push_back(static_cast<uint8_t>((p.type == 2 ? 4 : 2) << 4 | 12));  // field 7 or 5, a struct
    put_i32(out, 1, p.num_values);
    put_i32(out, 1, p.encoding);
    if (p.type == 0) put_i32(out, 1, 3), put_i32(out, 1, 3);  // level encodings: RLE
  }
  out.push_back(0);  // the data page header's end
  out.push_back(0);  // the page header's end
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// Definition levels 1, 0, 1 (bit width 1): one bit-packed group of 8.
const std::vector<uint8_t> kOneNullBetween = {0x03, 0b101};

ParquetValues scan(const std::vector<uint8_t>& file, uint64_t rows, int max_def, Status* st) {
  ParquetValues out;
  *st =
      scan_parquet_chunk(file, {.offset = 0, .size = file.size(), .num_values = rows, .max_definition_level = max_def},
                         "x.parquet: column image.bytes", out);
  return out;
}

std::string at(const std::vector<uint8_t>& file, const ParquetValues& v, size_t row) {
  return std::string(file.begin() + static_cast<long>(v.offsets[row]),
                     file.begin() + static_cast<long>(v.offsets[row] + v.lengths[row]));
}

TEST(ParquetPagesTest, LocatesPlainValuesAndNullsAcrossPages) {
  auto file = page({.type = 0, .num_values = 3, .levels = kOneNullBetween, .values = {"jpeg one", "two"}});
  const auto second = page({.type = 3, .num_values = 2, .levels = {0x04, 0x01}, .values = {"three", "four!"}});
  file.insert(file.end(), second.begin(), second.end());
  Status st;
  const ParquetValues v = scan(file, 5, 1, &st);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(v.offsets.size(), 5u);
  EXPECT_EQ(v.null, (std::vector<uint8_t>{0, 1, 0, 0, 0}));
  EXPECT_EQ(at(file, v, 0), "jpeg one");
  EXPECT_EQ(at(file, v, 2), "two");
  EXPECT_EQ(at(file, v, 3), "three");  // an RLE run of two 1s
  EXPECT_EQ(at(file, v, 4), "four!");
}

TEST(ParquetPagesTest, ARequiredColumnHasNoLevels) {
  // A v1 page of a required column (max definition level 0) has no levels, nor their length.
  Status st;
  std::vector<uint8_t> bare;
  put_i32(bare, 1, 0);
  put_i32(bare, 1, 9);
  put_i32(bare, 1, 9);
  bare.push_back(2 << 4 | 12);
  put_i32(bare, 1, 1);
  put_i32(bare, 1, 0);
  bare.push_back(0);
  bare.push_back(0);
  put_u32(bare, 5);
  for (char c : std::string("hello")) bare.push_back(static_cast<uint8_t>(c));
  const ParquetValues w = scan(bare, 1, 0, &st);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(at(bare, w, 0), "hello");
}

TEST(ParquetPagesTest, RefusesWhatIsNotReadableByOffsetSayingWhat) {
  Status st;
  scan(page({.type = 2, .num_values = 1, .values = {"dict"}}), 1, 1, &st);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("dictionary-encoded"), std::string::npos) << st.message();
  scan(page({.type = 0, .encoding = 8, .num_values = 1, .levels = {0x02, 0x01}, .values = {"x"}}), 1, 1, &st);
  EXPECT_NE(st.message().find("encoding 8, not PLAIN"), std::string::npos) << st.message();
  scan(page({.type = 0, .num_values = 1, .levels = {0x02, 0x01}, .values = {"x"}, .stored_size = 3}), 1, 1, &st);
  EXPECT_NE(st.message().find("a compressed page"), std::string::npos) << st.message();
}

TEST(ParquetPagesTest, TruncatedOrDamagedChunksAreErrorsNamingThePage) {
  const auto file = page({.type = 0, .num_values = 3, .levels = kOneNullBetween, .values = {"jpeg one", "two"}});
  Status st;
  for (size_t cut = 0; cut < file.size(); ++cut) {
    scan(std::vector<uint8_t>(file.begin(), file.begin() + static_cast<long>(cut)), 3, 1, &st);
    EXPECT_FALSE(st.is_ok()) << cut;
  }
  scan(file, 4, 1, &st);  // the footer promises more rows than the pages hold
  EXPECT_NE(st.message().find("ends after 3 of its 4 values"), std::string::npos) << st.message();
  auto damaged = file;
  damaged[damaged.size() - 7] = 0xff;  // the second value's length (its 4 bytes, then "two")
  scan(damaged, 3, 1, &st);
  EXPECT_NE(st.message().find("x.parquet: column image.bytes: the page at offset 0: value 2 claims"), std::string::npos)
      << st.message();
  ParquetValues out;
  st = scan_parquet_chunk(file, {.offset = 4, .size = file.size(), .num_values = 3, .max_definition_level = 1}, "x",
                          out);
  EXPECT_NE(st.message().find("runs past the file's end"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace chute
