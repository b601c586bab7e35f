#include "chute/io/shard_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "chute/remote/cache_key.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::shared_ptr<ObjectStore> local_store() {
  auto store = ObjectStore::create(nullptr, {}, [](const std::string&) -> Result<std::optional<std::string>> {
    return std::optional<std::string>();
  });
  EXPECT_TRUE(store.is_ok()) << store.status().to_string();
  return store.value();
}

std::vector<uint8_t> content(int i) {
  std::vector<uint8_t> bytes(static_cast<size_t>(5000 + 1000 * i));
  for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(i * 13 + j * 7);
  return bytes;
}

// n objects under dir/objects (local paths are objects too), keyed as a packed shard's would be.
std::vector<StreamedShard> make_shards(const TempDir& dir, int n) {
  std::vector<StreamedShard> out;
  for (int i = 0; i < n; ++i) {
    const std::string name = "objects/s" + std::to_string(i);
    dir.write(name, content(i));
    const std::string path = (dir.path() / name).string();
    out.push_back({.object = {.url = path, .size = content(i).size(), .etag = {}}, .key = cache_key(path, 1000 + i)});
  }
  return out;
}

std::shared_ptr<ShardStream> stream_of(std::vector<StreamedShard> shards, std::shared_ptr<ShardCache> cache = nullptr,
                                       ShardStream::Check check = {}, uint64_t memory = uint64_t{64} << 20) {
  auto s = ShardStream::create(local_store(), std::move(cache), std::move(shards), std::move(check),
                               {.fetch_threads = 2, .memory_bytes = memory});
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.value();
}

std::vector<uint8_t> bytes_of(const ShardBytes& b) { return {b.bytes().begin(), b.bytes().end()}; }

TEST(ShardStreamTest, ServesEveryShardFromMemoryWithNothingOnDisk) {
  TempDir dir;
  auto stream = stream_of(make_shards(dir, 5));
  EXPECT_EQ(stream->cache_policy(), CachePolicy::kNone);
  for (uint32_t i = 0; i < 5; ++i) {
    auto got = stream->get(i);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(bytes_of(**got), content(static_cast<int>(i)));
  }
  const RemoteStats s = stream->stats();
  EXPECT_EQ(s.shard_fetches, 5u);
  EXPECT_EQ(s.cache_hits, 0u);
  EXPECT_EQ(s.bytes_received, 5000u * 5 + 1000u * 10);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);  // objects/ only
  EXPECT_FALSE(stream->get(5).is_ok());
}

TEST(ShardStreamTest, ItsBuffersAreReusedWithinTheMemoryLimit) {
  TempDir dir;
  auto stream = stream_of(make_shards(dir, 6), nullptr, {}, 1);  // one buffer: the least there is
  EXPECT_EQ(stream->memory_limit(), stream->buffer_bytes());
  EXPECT_GE(stream->buffer_bytes(), content(5).size());  // the largest shard
  for (int round = 0; round < 2; ++round)
    for (uint32_t i = 0; i < 6; ++i) {
      auto got = stream->get(i);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(bytes_of(**got), content(static_cast<int>(i)));
    }
  EXPECT_EQ(stream->stats().buffers, 1);
  EXPECT_EQ(stream->stats().shard_fetches, 12u);  // each shard taken back for the next: fetched again
  stream->set_memory_limit(3 * stream->buffer_bytes(), 1);
  EXPECT_EQ(stream->memory_limit(), 3 * stream->buffer_bytes());
}

TEST(ShardStreamTest, ALoweredLimitFreesMemoryAtOnce) {
  TempDir dir;
  auto stream = stream_of(make_shards(dir, 6));
  for (uint32_t i = 0; i < 6; ++i) ASSERT_TRUE(stream->get(i).is_ok());
  EXPECT_EQ(stream->stats().buffers, 6);  // all in memory: the limit holds them
  auto held = stream->get(5);
  stream->set_memory_limit(2 * stream->buffer_bytes(), 1);  // a loader's share, say
  EXPECT_EQ(stream->stats().buffers, 2);                    // the least recently used went at once
  EXPECT_EQ(bytes_of(**held), content(5));                  // never one a reader holds
}

TEST(ShardStreamTest, AShardHeldByAReaderKeepsItsBytes) {
  TempDir dir;
  auto stream = stream_of(make_shards(dir, 3), nullptr, {}, 1);
  auto held = stream->get(0);
  ASSERT_TRUE(held.is_ok());
  // The pool has one buffer and a reader holds it: the next shard waits for it...
  std::thread reader([&] {
    auto next = stream->get(1);
    ASSERT_TRUE(next.is_ok());
    EXPECT_EQ(bytes_of(**next), content(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(bytes_of(**held), content(0));  // ...and never takes it from under the reader
  held->reset();
  reader.join();
}

TEST(ShardStreamTest, ACheckFailureIsTheStoragesErrorNamingTheShardUntilTheNextPlan) {
  TempDir dir;
  int checks = 0;
  auto stream = stream_of(make_shards(dir, 2), nullptr, [&](uint32_t i, std::span<const uint8_t>) -> Status {
    ++checks;
    return i == 1 ? corrupt_data("not the shard its index lists") : Status::ok();
  });
  ASSERT_TRUE(stream->get(0).is_ok());
  auto bad = stream->get(1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kEnvironment);
  EXPECT_NE(bad.status().message().find("objects/s1"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("not the shard its index lists"), std::string::npos);
  EXPECT_FALSE(stream->get(1).is_ok());
  EXPECT_EQ(checks, 2);  // remembered: not fetched again
  stream->plan_shards({});
  EXPECT_FALSE(stream->get(1).is_ok());
  EXPECT_EQ(checks, 3);  // a new plan tries again
}

TEST(ShardStreamTest, WithADiskCacheTheNextStreamReadsItsShardsBackFromDisk) {
  TempDir dir;
  auto cache = ShardCache::open({.dir = (dir.path() / "cache").string()});
  ASSERT_TRUE(cache.is_ok());
  auto shards = make_shards(dir, 4);
  int checks = 0;
  const auto check = [&](uint32_t, std::span<const uint8_t>) {
    ++checks;
    return Status::ok();
  };
  {
    auto first = stream_of(shards, *cache, check);
    EXPECT_EQ(first->cache_policy(), CachePolicy::kDisk);
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(first->get(i).is_ok());
    EXPECT_EQ(first->stats().shard_fetches, 4u);
  }
  EXPECT_EQ((*cache)->list().size(), 4u);
  auto second = stream_of(shards, *cache, check);
  for (uint32_t i = 0; i < 4; ++i) {
    auto got = second->get(i);
    ASSERT_TRUE(got.is_ok());
    EXPECT_EQ(bytes_of(**got), content(static_cast<int>(i)));
  }
  EXPECT_EQ(second->stats().cache_hits, 4u);
  EXPECT_EQ(second->stats().shard_fetches, 0u);
  EXPECT_EQ(checks, 4);  // bytes read back are checked by their entry's checksum, not again by the source
}

TEST(ShardStreamTest, APlanFetchesItsShardsAheadOfTheReaders) {
  TempDir dir;
  auto stream = stream_of(make_shards(dir, 5));
  stream->plan_shards({4, 2, 0});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (stream->stats().shard_fetches < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(stream->stats().shard_fetches, 3u);  // the planned ones, with no reader asking
  ASSERT_TRUE(stream->get(2).is_ok());
  EXPECT_EQ(stream->stats().reader_waits, 0u);  // it was in memory already
}

TEST(ShardStreamTest, ItWantsTwoWindowsAndAWindowAheadOrTheWholeDatasetInTheSampleOrder) {
  TempDir dir;
  auto stream = stream_of(make_shards(dir, 5));
  const uint64_t b = stream->buffer_bytes();
  EXPECT_EQ(stream->memory_wanted(1).least, 2 * b);
  EXPECT_EQ(stream->memory_wanted(1).wanted, 3 * b);
  EXPECT_EQ(stream->memory_wanted(8).least, 5 * b);  // never more than the dataset
  EXPECT_EQ(stream->memory_wanted(0).least, b);
  EXPECT_EQ(stream->memory_wanted(0).wanted, 5 * b);
}

}  // namespace
}  // namespace chute
