#include "chute/formats/span_table.h"

#include <gtest/gtest.h>

#include <string>

namespace chute {
namespace {

TEST(SpanTableTest, MemoryTablesReadTheirSpansAndBadSamplesFail) {
  auto bytes = std::make_shared<const std::string>("xxIMAGE-ONEyyIMAGE-2");
  const std::span<const uint8_t> memory(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  std::vector<SpanTable> tables(2);
  for (int t = 0; t < 2; ++t) {
    tables[t].owner = bytes;
    tables[t].memory = memory;
    tables[t].name = "/data/batch " + std::to_string(t);  // a path: the index keeps its file name
  }
  tables[0].offsets = {2, 0};
  tables[0].lengths = {9, 0};
  tables[0].labels = {4, -1};
  tables[0].bad = {{1, "a null image"}};
  tables[1].offsets = {13};
  tables[1].lengths = {7};
  tables[1].labels = {5};
  tables[1].first_key = 2;
  auto source = open_span_table(tables, {});
  ASSERT_TRUE(source.is_ok()) << source.status().to_string();
  const auto& s = **source;
  ASSERT_EQ(s.size(), 3);
  std::vector<uint8_t> out;
  ASSERT_TRUE(s.read(0, out).is_ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "IMAGE-ONE");
  ASSERT_TRUE(s.read(2, out).is_ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "IMAGE-2");
  EXPECT_EQ(s.label(2), 5);
  EXPECT_EQ(s.name(2), "/data/batch 1:2");
  const Status bad = s.read(1, out);
  EXPECT_EQ(bad.code(), StatusCode::kCorruptData);
  EXPECT_EQ(bad.message(), "a null image");
  EXPECT_EQ(s.shard_sizes(), (std::vector<int64_t>{2, 1}));

  // A selection in another order (a datasets indices mapping): places 2, 0, 1, 2.
  auto picked = open_span_table(
      std::move(tables), {.unwrap = {}, .shard_sizes = {}, .no_shards = false, .labels = {}, .order = {2, 0, 1, 2}});
  ASSERT_TRUE(picked.is_ok()) << picked.status().to_string();
  const auto& p = **picked;
  ASSERT_EQ(p.size(), 4);
  ASSERT_TRUE(p.read(0, out).is_ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "IMAGE-2");
  EXPECT_EQ(p.label(1), 4);
  EXPECT_EQ(p.name(3), "/data/batch 1:2");
  EXPECT_EQ(p.read(2, out).message(), "a null image");
  EXPECT_EQ(p.bad_samples(), (std::vector<std::pair<int64_t, std::string>>{{2, "a null image"}}));
  EXPECT_TRUE(p.shard_sizes().empty());
}

TEST(SpanTableTest, SpansOutsideTheBytesAreRefused) {
  auto bytes = std::make_shared<const std::string>("short");
  SpanTable t;
  t.owner = bytes;
  t.memory = {reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()};
  t.name = "x";
  t.offsets = {3};
  t.lengths = {3};
  t.labels = {0};
  std::vector<SpanTable> tables;
  tables.push_back(std::move(t));
  auto source = open_span_table(std::move(tables), {});
  ASSERT_FALSE(source.is_ok());
  EXPECT_NE(source.status().message().find("past the end of its 5 bytes"), std::string::npos);
}

}  // namespace
}  // namespace chute
