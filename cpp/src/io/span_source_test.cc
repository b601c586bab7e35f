#include "chute/io/span_source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace chute {
namespace {

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// An index of memory, as a reader of decoded buffers (Parquet) builds one: spans of `bytes`.
CachedIndex memory_index(std::span<const uint8_t> bytes, const std::vector<std::pair<uint64_t, uint64_t>>& spans,
                         const std::vector<std::pair<uint64_t, std::string>>& bad = {}) {
  std::vector<IndexEntry> entries;
  std::string keys;
  for (const auto& [offset, size] : spans) {
    const std::string key = "row" + std::to_string(entries.size());
    entries.push_back({.offset = offset,
                       .payload_len = size,
                       .label = static_cast<int64_t>(entries.size()) * 10,
                       .key_offset = keys.size(),
                       .shard = 0,
                       .key_len = static_cast<uint32_t>(key.size())});
    keys += key;
  }
  const ShardInfo shard{.name = "buffer", .shard_id = 0, .file_size = bytes.size(), .record_count = spans.size()};
  auto encoded = std::make_shared<std::vector<uint8_t>>(
      encode_index(IndexKind::kSpan, {shard}, entries, keys, span_notes("test", bad)));
  auto view = IndexView::parse(*encoded, "test index");
  EXPECT_TRUE(view.is_ok()) << view.status().to_string();
  return {.owner = encoded, .view = *view, .path = ""};
}

TEST(SpanSourceTest, ReadsSpansOfMemoryItKeepsAlive) {
  auto buffer = std::make_shared<std::vector<uint8_t>>(bytes_of("..alpha...beta!"));
  SpanPart part{.file = nullptr,
                .owner = buffer,
                .memory = *buffer,
                .name = "row group 0",
                .index = memory_index(*buffer, {{2, 5}, {10, 4}})};
  auto source = SpanSource::create({part});
  ASSERT_TRUE(source.is_ok()) << source.status().to_string();
  buffer.reset();  // the part's owner keeps the bytes
  std::vector<uint8_t> out;
  ASSERT_TRUE((*source)->read(1, out).is_ok());
  EXPECT_EQ(out, bytes_of("beta"));
  EXPECT_EQ((*source)->label(1), 10);
  EXPECT_EQ((*source)->name(0), "row group 0:row0");
  EXPECT_EQ((*source)->key(0), "row0");
  EXPECT_EQ((*source)->shard_sizes(), std::vector<int64_t>{2});
  EXPECT_EQ((*source)->read_capped(0, out, 4).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(source_kind(**source), "SpanSource");
}

TEST(SpanSourceTest, BadSamplesFailTheirReadWithTheScansReason) {
  auto buffer = std::make_shared<std::vector<uint8_t>>(bytes_of("abcdef"));
  SpanPart part{.file = nullptr,
                .owner = buffer,
                .memory = *buffer,
                .name = "m",
                .index = memory_index(*buffer, {{0, 3}, {0, 0}, {3, 3}}, {{1, "a null image cell"}})};
  auto source = SpanSource::create({part});
  ASSERT_TRUE(source.is_ok());
  std::vector<uint8_t> out;
  const Status st = (*source)->read(1, out);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  EXPECT_EQ(st.message(), "a null image cell");
  EXPECT_TRUE((*source)->read(2, out).is_ok());
  ASSERT_EQ((*source)->bad_samples().size(), 1u);
  EXPECT_EQ((*source)->bad_samples()[0].first, 1);
}

TEST(SpanSourceTest, FilePartsUnwrapShardsAndLabelsFromOutside) {
  testing::TempDir dir;
  std::vector<uint8_t> a = bytes_of("<x1>");
  a.resize(8192);  // the second record two pages in: a truncation to one page cuts it off the mapping
  for (uint8_t c : bytes_of("<y22>")) a.push_back(c);
  dir.write("a.bin", a);
  dir.write("b.bin", bytes_of("<z333>"));
  std::vector<SpanPart> parts;
  for (const auto& [name, spans] : std::vector<std::pair<std::string, std::vector<std::pair<uint64_t, uint64_t>>>>{
           {"a.bin", {{0, 4}, {8192, 5}}}, {"b.bin", {{0, 6}}}}) {
    auto file = MappedFile::open((dir.path() / name).string());
    ASSERT_TRUE(file.is_ok());
    parts.push_back(
        {.file = *file, .owner = {}, .memory = {}, .name = "", .index = memory_index((*file)->bytes(), spans)});
  }
  // The records are "<...>": unwrap strips the brackets, and refuses a record without them.
  SpanOptions options{.unwrap = [](std::vector<uint8_t>& b) -> Status {
                        if (b.size() < 2 || b.front() != '<' || b.back() != '>') return corrupt_data("no brackets");
                        b = std::vector<uint8_t>(b.begin() + 1, b.end() - 1);
                        return Status::ok();
                      },
                      .shard_sizes = {},
                      .no_shards = false,
                      .labels = {}};
  auto source = SpanSource::create(parts, options);
  ASSERT_TRUE(source.is_ok()) << source.status().to_string();
  std::vector<uint8_t> out;
  ASSERT_TRUE((*source)->read(2, out).is_ok());
  EXPECT_EQ(out, bytes_of("z333"));
  EXPECT_EQ((*source)->shard_sizes(), (std::vector<int64_t>{2, 1}));  // a shard per file
  EXPECT_EQ((*source)->key(2), "b.bin:row0");                         // unique across files
  EXPECT_EQ((*source)->name(2), (dir.path() / "b.bin").string() + ":row0");

  auto relabelled = (*source)->with_labels({7, 8, 9});
  ASSERT_TRUE(relabelled.is_ok());
  EXPECT_EQ((*relabelled)->label(1), 8);
  EXPECT_EQ((*relabelled)->shard_sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE((*source)->with_labels({1}).is_ok());  // one label per sample

  // A file truncated under its mapping: the read is the sample's error, not a SIGBUS.
  std::filesystem::resize_file(dir.path() / "a.bin", 4096);
  const Status st = (*source)->read(1, out);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_NE(st.message().find("at offset 8192"), std::string::npos) << st.message();
}

TEST(SpanSourceTest, AnIndexThatDoesNotFitItsBytesIsRefused) {
  auto small = std::make_shared<std::vector<uint8_t>>(bytes_of("abc"));
  auto big = std::make_shared<std::vector<uint8_t>>(bytes_of("abcdefgh"));
  SpanPart part{.file = nullptr, .owner = small, .memory = *small, .name = "m", .index = memory_index(*big, {{4, 4}})};
  EXPECT_EQ(SpanSource::create({part}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chute
