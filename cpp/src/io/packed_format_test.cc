#include "chute/io/packed_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

namespace chute {
namespace {

std::string message(const Status& st) { return st.message(); }

struct Built {
  std::vector<uint8_t> shard, index;
};

// A shard with three records and its index, built with the format's own encoders.
Built build() {
  ShardInfo info{.name = "shard-00000.chute", .shard_id = 42};
  std::vector<IndexEntry> entries;
  std::string keys;
  std::vector<uint8_t> shard(kShardHeaderSize, 0);
  const std::vector<std::vector<uint8_t>> payloads = {{1, 2, 3}, {}, std::vector<uint8_t>(100, 7)};
  for (size_t i = 0; i < payloads.size(); ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto header = encode_record_header(key, payloads[i], static_cast<int64_t>(i) - 1);
    entries.push_back({.offset = shard.size(),
                       .payload_len = payloads[i].size(),
                       .label = static_cast<int64_t>(i) - 1,
                       .key_offset = keys.size(),
                       .shard = 0,
                       .key_len = static_cast<uint32_t>(key.size())});
    keys += key;
    shard.insert(shard.end(), header.begin(), header.end());
    shard.insert(shard.end(), key.begin(), key.end());
    shard.insert(shard.end(), payloads[i].begin(), payloads[i].end());
    shard.resize(align_up(shard.size()), 0);
  }
  info.record_count = entries.size();
  info.file_size = shard.size();
  const auto header = encode_shard_header({.shard_id = 42, .record_count = 3, .file_size = shard.size()});
  std::memcpy(shard.data(), header.data(), header.size());
  return {shard, encode_index(IndexKind::kPacked, {info}, entries, keys, {"cat", "dog"})};
}

void reseal_index(std::vector<uint8_t>& index) {
  const uint64_t sum = checksum(std::span(index).subspan(16));
  std::memcpy(index.data() + 8, &sum, 8);
}

TEST(PackedFormatTest, RoundTripsIndexAndRecords) {
  const Built b = build();
  auto view = IndexView::parse(b.index, "idx");
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  EXPECT_EQ(view->size(), 3u);
  EXPECT_EQ(view->classes(), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(view->shards().size(), 1u);
  EXPECT_EQ(view->shards()[0].name, "shard-00000.chute");
  ASSERT_TRUE(parse_shard_header(b.shard, "s").is_ok());
  for (uint64_t i = 0; i < 3; ++i) {
    const IndexEntry e = view->entry(i);
    EXPECT_EQ(view->key(e), "k" + std::to_string(i));
    EXPECT_EQ(e.label, static_cast<int64_t>(i) - 1);
    auto payload = parse_record(b.shard, e, true);
    ASSERT_TRUE(payload.is_ok()) << payload.status().to_string();
    EXPECT_EQ(payload->size(), e.payload_len);
  }
}

TEST(PackedFormatTest, NewerVersionIsAClearError) {
  Built b = build();
  const uint32_t newer = kFormatVersion + 1;
  std::memcpy(b.index.data() + 16, &newer, 4);
  reseal_index(b.index);
  auto view = IndexView::parse(b.index, "idx");
  ASSERT_FALSE(view.is_ok());
  EXPECT_EQ(view.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(message(view.status()).find("newer chute"), std::string::npos) << message(view.status());
  std::memcpy(b.shard.data() + 16, &newer, 4);
  auto shard = parse_shard_header(b.shard, "s");
  ASSERT_FALSE(shard.is_ok());
  EXPECT_NE(message(shard.status()).find("format version " + std::to_string(newer)), std::string::npos);
}

// The index as chute's version 1 wrote it: 40-byte entries (no kind, stored size or source bytes).
std::vector<uint8_t> as_version1(const std::vector<uint8_t>& v2) {
  uint64_t n, entries_off, strings_off;
  std::memcpy(&n, v2.data() + 32, 8);
  std::memcpy(&entries_off, v2.data() + 72, 8);
  std::memcpy(&strings_off, v2.data() + 80, 8);
  std::vector<uint8_t> v1(v2.begin(), v2.begin() + static_cast<std::ptrdiff_t>(entries_off));
  for (uint64_t i = 0; i < n; ++i) {
    const auto e = v2.begin() + static_cast<std::ptrdiff_t>(entries_off + i * kIndexEntrySize);
    v1.insert(v1.end(), e, e + kIndexEntrySizeV1);
  }
  const uint64_t new_strings = v1.size();
  v1.insert(v1.end(), v2.begin() + static_cast<std::ptrdiff_t>(strings_off), v2.end());
  const uint32_t version = 1, entry_size = kIndexEntrySizeV1;
  std::memcpy(v1.data() + 16, &version, 4);
  std::memcpy(v1.data() + 28, &entry_size, 4);
  std::memcpy(v1.data() + 80, &new_strings, 8);
  reseal_index(v1);
  return v1;
}

TEST(PackedFormatTest, Version1IndexesStillRead) {
  Built b = build();
  const std::vector<uint8_t> v1 = as_version1(b.index);
  auto view = IndexView::parse(v1, "idx");
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  EXPECT_EQ(view->version(), 1u);
  for (uint64_t i = 0; i < 3; ++i) {
    const IndexEntry e = view->entry(i);
    EXPECT_EQ(view->key(e), "k" + std::to_string(i));
    EXPECT_EQ(e.kind, RecordKind::kUnknown);
    EXPECT_EQ(e.source_bytes, e.payload_len);  // nothing was transformed before version 2
    EXPECT_TRUE(parse_record(b.shard, e, true).is_ok());
  }
  const uint32_t v1_shard = 1;  // a version 1 shard header
  std::memcpy(b.shard.data() + 16, &v1_shard, 4);
  const uint64_t sum = checksum(std::span(b.shard).subspan(16, kShardHeaderSize - 16));
  std::memcpy(b.shard.data() + 8, &sum, 8);
  EXPECT_TRUE(parse_shard_header(b.shard, "s").is_ok());
}

TEST(PackedFormatTest, RecordKindAndStoredSizeRoundTrip) {
  std::vector<IndexEntry> entries = {{.offset = kShardHeaderSize,
                                      .payload_len = 8,
                                      .source_bytes = 1000,
                                      .kind = RecordKind::kRawZstd,
                                      .width = 7,
                                      .height = 9}};
  ShardInfo info{.name = "s.chute", .file_size = kShardHeaderSize + kRecordHeaderSize + 8, .record_count = 1};
  std::vector<uint8_t> index = encode_index(IndexKind::kPacked, {info}, entries, "", {});
  auto view = IndexView::parse(index, "idx");
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  const IndexEntry e = view->entry(0);
  EXPECT_EQ(e.kind, RecordKind::kRawZstd);
  EXPECT_EQ(e.source_bytes, 1000u);
  EXPECT_EQ(e.width, 7u);
  EXPECT_EQ(e.height, 9u);
  EXPECT_STREQ(record_kind_name(e.kind), "raw-zstd");
  const uint32_t bogus = kLastRecordKind + 1;
  uint64_t entries_off;
  std::memcpy(&entries_off, index.data() + 72, 8);
  std::memcpy(index.data() + entries_off + 48, &bogus, 4);
  reseal_index(index);
  auto bad = IndexView::parse(index, "idx");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(message(bad.status()).find("unknown record kind"), std::string::npos) << message(bad.status());
}

TEST(PackedFormatTest, EveryTruncationOfTheIndexIsRejected) {
  const Built b = build();
  for (size_t n = 0; n < b.index.size(); ++n) {
    auto view = IndexView::parse(std::span(b.index).first(n), "idx");
    EXPECT_FALSE(view.is_ok()) << n;
  }
}

TEST(PackedFormatTest, FlippedIndexBytesFailTheChecksum) {
  Built b = build();
  b.index[b.index.size() / 2] ^= 0x10;
  auto view = IndexView::parse(b.index, "idx");
  ASSERT_FALSE(view.is_ok());
  EXPECT_NE(message(view.status()).find("idx: index checksum mismatch"), std::string::npos);
  Built magic = build();
  magic.index[0] = 'X';
  EXPECT_NE(message(IndexView::parse(magic.index, "idx").status()).find("wrong magic"), std::string::npos);
}

TEST(PackedFormatTest, EntryPastTheShardEndIsRejectedEvenWithAValidChecksum) {
  Built b = build();
  auto view = IndexView::parse(b.index, "idx");
  ASSERT_TRUE(view.is_ok());
  // Entry 2's payload length, made huge (and one that overflows 64 bits).
  for (uint64_t len : {uint64_t{1} << 40, UINT64_MAX - 8}) {
    std::vector<uint8_t> index = b.index;
    uint64_t entries_off;
    std::memcpy(&entries_off, index.data() + 72, 8);
    std::memcpy(index.data() + entries_off + 2 * kIndexEntrySize + 8, &len, 8);
    reseal_index(index);
    auto bad = IndexView::parse(index, "idx");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(message(bad.status()).find("record 2 (shard shard-00000.chute)"), std::string::npos)
        << message(bad.status());
  }
}

TEST(PackedFormatTest, RecordChecksLengthsLabelAndChecksum) {
  Built b = build();
  auto view = IndexView::parse(b.index, "idx");
  ASSERT_TRUE(view.is_ok());
  const IndexEntry e = view->entry(2);
  // A flipped payload byte: only the checksum notices.
  std::vector<uint8_t> flipped = b.shard;
  flipped[e.offset + kRecordHeaderSize + e.key_len + 50] ^= 1;
  EXPECT_TRUE(parse_record(flipped, e, false).is_ok());
  EXPECT_NE(message(parse_record(flipped, e, true).status()).find("checksum mismatch"), std::string::npos);
  // The message shows the stored and the computed checksum, as two different values.
  uint64_t stored;
  std::memcpy(&stored, flipped.data() + e.offset, 8);
  const uint64_t computed =
      checksum(std::span(flipped).subspan(e.offset + 8, kRecordHeaderSize - 8 + e.key_len + e.payload_len));
  ASSERT_NE(stored, computed);
  char expected[96];
  std::snprintf(expected, sizeof expected, "stored 0x%016llx, computed 0x%016llx",
                static_cast<unsigned long long>(stored), static_cast<unsigned long long>(computed));
  EXPECT_NE(message(parse_record(flipped, e, true).status()).find(expected), std::string::npos)
      << message(parse_record(flipped, e, true).status()) << " lacks " << expected;
  // A record length past the end of the file.
  std::vector<uint8_t> longer = b.shard;
  const uint64_t huge = UINT64_MAX - 3;
  std::memcpy(longer.data() + e.offset + 16, &huge, 8);
  EXPECT_NE(message(parse_record(longer, e, true).status()).find("runs past the end"), std::string::npos);
  // The index and the record disagree about the label.
  IndexEntry other = e;
  other.label = 5;
  EXPECT_NE(message(parse_record(b.shard, other, true).status()).find("index disagrees"), std::string::npos);
  // ... or about the key's length alone: the message names that field, not equal lengths and labels.
  other = e;
  other.key_len = e.key_len + 1;
  const std::string keys = message(parse_record(b.shard, other, true).status());
  EXPECT_NE(keys.find("key length: index " + std::to_string(e.key_len + 1) + ", record " + std::to_string(e.key_len)),
            std::string::npos)
      << keys;
  EXPECT_EQ(keys.find("label"), std::string::npos) << keys;
  // An offset that is not a record.
  other = e;
  other.offset = 8;
  EXPECT_NE(message(parse_record(b.shard, other, true).status()).find("bad record magic"), std::string::npos);
  other.offset = b.shard.size() - 4;
  EXPECT_NE(message(parse_record(b.shard, other, true).status()).find("past the end"), std::string::npos);
}

TEST(PackedFormatTest, ShardHeaderCatchesTruncationMagicAndCorruption) {
  Built b = build();
  auto cut = parse_shard_header(std::span(b.shard).first(b.shard.size() - 8), "s.chute");
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(message(cut.status())
                .find("s.chute: " + std::to_string(b.shard.size() - 8) + " bytes, but its header says " +
                      std::to_string(b.shard.size()) + " (truncated)"),
            std::string::npos)
      << message(cut.status());
  EXPECT_NE(message(parse_shard_header(std::span(b.shard).first(10), "s").status()).find("shorter than a shard header"),
            std::string::npos);
  std::vector<uint8_t> flipped = b.shard;
  flipped[30] ^= 1;
  EXPECT_NE(message(parse_shard_header(flipped, "s").status()).find("header checksum"), std::string::npos);
  flipped = b.shard;
  flipped[1] = 'X';
  EXPECT_NE(message(parse_shard_header(flipped, "s").status()).find("wrong magic"), std::string::npos);
}

TEST(PackedFormatTest, ShardNamesCannotLeaveTheDataset) {
  ShardInfo info{.name = "../etc/passwd", .shard_id = 1};
  const auto index = encode_index(IndexKind::kPacked, {info}, {}, "", {});
  auto view = IndexView::parse(index, "idx");
  ASSERT_FALSE(view.is_ok());
  EXPECT_NE(message(view.status()).find("bad file name"), std::string::npos);
}

}  // namespace
}  // namespace chute
