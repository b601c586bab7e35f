#include "chute/io/packed_source.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "chute/pack/pack_writer.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::MemorySource;
using testing::TempDir;
namespace fs = std::filesystem;

std::vector<std::vector<uint8_t>> payloads(int n) {
  std::vector<std::vector<uint8_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> p(static_cast<size_t>(37 * i % 500 + (i % 5 == 0 ? 0 : 1)));  // sizes vary; some empty
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<uint8_t>(i * 31 + j);
    out.push_back(std::move(p));
  }
  return out;
}

PackOptions options(const TempDir& dir, uint64_t shard_size = 4096, int threads = 3) {
  PackOptions o;
  o.dst = (dir.path() / "packed").string();
  o.shard_size = shard_size;
  o.num_threads = threads;
  o.check = ImageCheck::kNone;  // these payloads are bytes, not images: the tests are about the format
  return o;
}

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(PackedSourceTest, PackThenOpenGivesTheSameSamplesInOrder) {
  TempDir dir;
  const auto items = payloads(200);
  MemorySource src(items, 7);
  auto summary = pack(src, {"a", "b"}, options(dir));
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_EQ(summary->samples, 200);
  EXPECT_GT(summary->shards, 5);  // 4 KiB shards
  auto packed = PackedSource::open((dir.path() / "packed").string());
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  const PackedSource& p = **packed;
  ASSERT_EQ(p.size(), 200);
  EXPECT_EQ(p.classes(), (std::vector<std::string>{"a", "b"}));
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < p.size(); ++i) {
    ASSERT_TRUE(p.read(i, out).is_ok());
    EXPECT_EQ(out, items[i]) << i;
    EXPECT_EQ(p.label(i), i % 7);
    EXPECT_EQ(p.name(i), "mem://" + std::to_string(i));
  }
  EXPECT_TRUE(p.verify(0, p.size()).empty());
  for (const auto& e : fs::directory_iterator(dir.path() / "packed"))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(PackedSourceTest, ShardSizesAreTheShardsContiguousRanges) {
  TempDir dir;
  MemorySource src(payloads(200));
  ASSERT_TRUE(pack(src, {}, options(dir)).is_ok());
  auto packed = PackedSource::open((dir.path() / "packed").string());
  ASSERT_TRUE(packed.is_ok());
  const PackedSource& p = **packed;
  const std::vector<int64_t> sizes = p.shard_sizes();
  ASSERT_EQ(sizes.size(), p.shards().size());
  ASSERT_GT(sizes.size(), 5u);
  int64_t first = 0;  // shard s holds [first, first + sizes[s]): every entry of that range names shard s
  for (size_t s = 0; s < sizes.size(); ++s) {
    EXPECT_EQ(static_cast<uint64_t>(first), p.shards()[s].first_sample);
    for (int64_t i = first; i < first + sizes[s]; ++i) ASSERT_EQ(p.entry(i).shard, s) << "record " << i;
    first += sizes[s];
  }
  EXPECT_EQ(first, p.size());
}

TEST(PackedSourceTest, ReadsFromManyThreadsAtOnce) {
  TempDir dir;
  const auto items = payloads(300);
  MemorySource src(items);
  ASSERT_TRUE(pack(src, {}, options(dir)).is_ok());
  auto packed = PackedSource::open((dir.path() / "packed").string());
  ASSERT_TRUE(packed.is_ok());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int64_t i = t; i < 300; i += 2)
        if (!(*packed)->read(i, out).is_ok() || out != items[i]) ++mismatches;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(PackedSourceTest, PartsWriteDisjointRangesAndMergeInOrder) {
  TempDir dir;
  const auto items = payloads(101);
  MemorySource src(items);
  PackOptions o = options(dir);
  o.parts = 3;
  for (int part : {2, 0}) {  // out of order, as independent packers finish
    o.part = part;
    ASSERT_TRUE(pack(src, {"x"}, o).is_ok());
  }
  auto early = merge_parts(o.dst);
  ASSERT_FALSE(early.is_ok());
  EXPECT_NE(early.status().message().find("part 1 of 3 is missing"), std::string::npos) << early.status().message();
  EXPECT_FALSE(PackedSource::open(o.dst).is_ok());  // no index yet: not a dataset
  o.part = 1;
  ASSERT_TRUE(pack(src, {"x"}, o).is_ok());
  auto merged = merge_parts(o.dst);
  ASSERT_TRUE(merged.is_ok()) << merged.status().to_string();
  EXPECT_EQ(merged->samples, 101);
  auto packed = PackedSource::open(o.dst);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < 101; ++i) {
    ASSERT_TRUE((*packed)->read(i, out).is_ok());
    EXPECT_EQ(out, items[i]);
  }
  EXPECT_FALSE(fs::exists(fs::path(o.dst) / part_index_name(0, 3)));
}

TEST(PackedSourceTest, RecordLargerThanTheShardSizeGetsAShardOfItsOwn) {
  TempDir dir;
  std::vector<std::vector<uint8_t>> items = {std::vector<uint8_t>(10, 1), std::vector<uint8_t>(9000, 2),
                                             std::vector<uint8_t>(20, 3)};
  MemorySource src(items);
  auto summary = pack(src, {}, options(dir, 4096));
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_EQ(summary->shards, 3);
  auto packed = PackedSource::open((dir.path() / "packed").string());
  ASSERT_TRUE(packed.is_ok());
  ASSERT_EQ((*packed)->shards().size(), 3u);
  EXPECT_EQ((*packed)->shards()[1].record_count, 1u);
  EXPECT_GT((*packed)->shards()[1].file_size, 9000u);
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE((*packed)->read(i, out).is_ok());
    EXPECT_EQ(out, items[i]);
  }
}

TEST(PackedSourceTest, MergeRefusesPartsOfDifferentSources) {
  TempDir dir;
  MemorySource src(payloads(20));
  PackOptions o = options(dir);
  o.parts = 2;
  o.part = 0;
  ASSERT_TRUE(pack(src, {"cat", "dog"}, o).is_ok());
  o.part = 1;
  ASSERT_TRUE(pack(src, {"cat", "emu"}, o).is_ok());
  auto merged = merge_parts(o.dst);
  ASSERT_FALSE(merged.is_ok());
  EXPECT_NE(merged.status().message().find("lists other classes than part 0"), std::string::npos)
      << merged.status().message();
  EXPECT_FALSE(fs::exists(fs::path(o.dst) / kIndexFileName));
}

TEST(PackedSourceTest, CancelledPackLeavesNothingThatOpens) {
  TempDir dir;
  MemorySource src(payloads(500));
  int calls = 0;
  auto result = pack(src, {}, options(dir, 4096, 1), [&](const PackProgress&) { return ++calls < 1; });
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(fs::is_empty(dir.path() / "packed"));  // no shard, no temporary file, no index
  auto open = PackedSource::open((dir.path() / "packed").string());
  ASSERT_FALSE(open.is_ok());
  EXPECT_NE(open.status().message().find("not a complete chute dataset"), std::string::npos);
}

TEST(PackedSourceTest, RefusesToOverwriteAndReportsBadSamples) {
  TempDir dir;
  MemorySource src(payloads(10));
  ASSERT_TRUE(pack(src, {}, options(dir)).is_ok());
  auto again = pack(src, {}, options(dir));
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.status().message().find("already holds a packed dataset"), std::string::npos);

  class Failing final : public Source {
   public:
    int64_t size() const override { return 20; }
    int64_t label(int64_t) const override { return 0; }
    std::string name(int64_t i) const override { return "f" + std::to_string(i); }
    Status read(int64_t i, std::vector<uint8_t>& out) const override {
      out.assign(10, 1);
      return i == 13 ? io_error("disk on fire") : Status::ok();
    }
  } failing;
  PackOptions o = options(dir);
  o.dst = (dir.path() / "failing").string();
  auto bad = pack(failing, {}, o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "sample 13 (f13): disk on fire");
  EXPECT_TRUE(fs::is_empty(o.dst));
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MemorySource src(payloads(60));
    auto summary = pack(src, {}, options(dir_, 4096, 2));
    ASSERT_TRUE(summary.is_ok());
    root_ = dir_.path() / "packed";
    shard_ = root_ / shard_file_name(0, 1, 1);
  }
  Status open_error() {
    auto r = PackedSource::open(root_.string());
    return r.is_ok() ? Status::ok() : r.status();
  }
  TempDir dir_;
  fs::path root_, shard_;
};

TEST_F(CorruptionTest, TruncatedShardNamesTheShard) {
  auto bytes = slurp(shard_);
  bytes.resize(bytes.size() - 100);
  spit(shard_, bytes);
  const Status st = open_error();
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  EXPECT_NE(st.message().find(shard_.string() + ": "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("(truncated)"), std::string::npos) << st.message();
}

TEST_F(CorruptionTest, FlippedPayloadByteNamesShardAndRecord) {
  int64_t victim = 0;
  size_t at = 0;  // the victim's first payload byte in its shard: the shard's second record
  {
    auto packed = PackedSource::open(root_.string());
    ASSERT_TRUE(packed.is_ok());
    const int64_t first = static_cast<int64_t>((*packed)->shards()[1].first_sample);
    victim = first + 1;
    at = kShardHeaderSize + record_size((*packed)->name(first).size(), (*packed)->payload_size(first)) +
         kRecordHeaderSize + (*packed)->name(victim).size();
    ASSERT_GT((*packed)->payload_size(victim), 0u);
  }
  auto bytes = slurp(shard_);
  bytes[at] ^= 0x40;
  spit(shard_, bytes);
  auto reopened = PackedSource::open(root_.string());
  ASSERT_TRUE(reopened.is_ok()) << reopened.status().to_string();  // headers are intact
  std::vector<uint8_t> out;
  const Status st = (*reopened)->read(victim, out);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  EXPECT_NE(st.message().find("shard " + shard_.string() + ", record " + std::to_string(victim) + " (mem://" +
                              std::to_string(victim) + "): checksum mismatch"),
            std::string::npos)
      << st.message();
  const auto bad = (*reopened)->verify(0, (*reopened)->size());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].first, victim);
  PackedOptions fast;
  fast.verify_checksums = false;
  auto unchecked = PackedSource::open(root_.string(), fast);
  ASSERT_TRUE(unchecked.is_ok());
  EXPECT_TRUE((*unchecked)->read(victim, out).is_ok());  // the documented trade-off
}

TEST_F(CorruptionTest, WrongMagicMissingIndexMissingShardAndForeignShard) {
  auto bytes = slurp(shard_);
  bytes[0] = 'Z';
  spit(shard_, bytes);
  EXPECT_NE(open_error().message().find(shard_.string() + ": not a chute shard (wrong magic)"), std::string::npos);
  bytes[0] = 'C';
  spit(shard_, bytes);
  EXPECT_TRUE(open_error().is_ok());

  // A shard from another pack: samples of the same sizes, other bytes, so another id (a shard's id is the
  // hash of its record headers: packing the same samples again gives the same shard, which belongs).
  TempDir other;
  auto others = payloads(60);
  for (auto& p : others)
    for (auto& byte : p) byte = static_cast<uint8_t>(~byte);
  MemorySource src(std::move(others));
  ASSERT_TRUE(pack(src, {}, options(other, 4096, 2)).is_ok());
  fs::copy_file(other.path() / "packed" / shard_file_name(0, 1, 1), shard_, fs::copy_options::overwrite_existing);
  EXPECT_NE(open_error().message().find("the index disagrees with shard " + shard_.string()), std::string::npos)
      << open_error().message();
  EXPECT_NE(open_error().message().find("written by another pack"), std::string::npos);

  fs::remove(shard_);
  EXPECT_NE(open_error().message().find("lists shard " + shard_file_name(0, 1, 1) + ", which is missing"),
            std::string::npos);
  fs::remove(root_ / kIndexFileName);
  EXPECT_EQ(open_error().code(), StatusCode::kNotFound);
  EXPECT_NE(open_error().message().find("index.chidx is missing"), std::string::npos);
}

TEST_F(CorruptionTest, TruncatedOrFlippedIndexIsRejected) {
  auto bytes = slurp(root_ / kIndexFileName);
  spit(root_ / kIndexFileName, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  EXPECT_NE(open_error().message().find("index checksum mismatch"), std::string::npos) << open_error().message();
  bytes[200] ^= 1;
  spit(root_ / kIndexFileName, bytes);
  EXPECT_EQ(open_error().code(), StatusCode::kCorruptData);
}

TEST(PackedSourceTest, PackChecksImagesAndSkipBadLeavesOutWhatTheLoaderCannotDecode) {
  TempDir dir;
  const auto jpeg = testing::encode_jpeg(testing::synthetic_rgb(40, 30, 2), 40, 30);
  const std::string text = "not an image";
  MemorySource src({jpeg, {text.begin(), text.end()}, jpeg, {'B', 'M', 0, 0}, jpeg}, 5);
  PackOptions o = options(dir);
  o.check = ImageCheck::kHeader;
  auto refused = pack(src, {}, o);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("sample 1 (mem://1)"), std::string::npos) << refused.status().message();
  EXPECT_FALSE(fs::exists(dir.path() / "packed" / kIndexFileName));
  o.skip_bad = true;
  auto summary = pack(src, {}, o);
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_EQ(summary->samples, 3);
  ASSERT_EQ(summary->skipped.size(), 2u);
  EXPECT_EQ(summary->skipped[0].index, 1);
  EXPECT_EQ(summary->skipped[1].index, 3);
  EXPECT_NE(summary->skipped[1].status.message().find("BMP"), std::string::npos);
  auto packed = PackedSource::open((dir.path() / "packed").string());
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  ASSERT_EQ((*packed)->size(), 3);
  const std::vector<int64_t> labels = {0, 2, 4};  // the source's labels of samples 0, 2, 4
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> out;
    ASSERT_TRUE((*packed)->read(i, out).is_ok());
    EXPECT_EQ(out, jpeg);
    EXPECT_EQ((*packed)->label(i), labels[static_cast<size_t>(i)]);
  }
  // A read error is not the file's verdict: skip_bad does not skip it, the pack fails naming the sample.
  const auto dst = dir.path() / "failing";
  o.dst = dst.string();
  testing::FailingSource failing(std::make_shared<MemorySource>(std::vector<std::vector<uint8_t>>{jpeg, jpeg, jpeg}),
                                 {1});
  auto io = pack(failing, {}, o);
  ASSERT_FALSE(io.is_ok());
  EXPECT_EQ(io.status().code(), StatusCode::kIoError);
  EXPECT_NE(io.status().message().find("sample 1 (mem://1)"), std::string::npos) << io.status().message();
  EXPECT_FALSE(fs::exists(dst / kIndexFileName));
}

}  // namespace
}  // namespace chute
