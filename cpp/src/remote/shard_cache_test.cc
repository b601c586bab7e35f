#include "chute/remote/shard_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <set>
#include <stdexcept>
#include <thread>

#include "base/detail/file_lock.h"
#include "chute/base/buffer_pool.h"
#include "test_util.h"

namespace chute {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

// A fill writing `data`, counting its calls.
ShardCache::Fill fill_with(std::vector<uint8_t> data, std::atomic<int>* calls) {
  return [data = std::move(data), calls](std::span<uint8_t> dst) {
    ++*calls;
    if (dst.size() != data.size()) return io_error("a fill of the wrong size");
    std::copy(data.begin(), data.end(), dst.begin());
    return Status::ok();
  };
}

// What get() gave, and the bytes it left in the caller's buffer.
struct Got {
  Result<ShardCache::Got> got;
  std::vector<uint8_t> bytes;
};

Got get(ShardCache& cache, const std::string& key, size_t size, const ShardCache::Fill& fill,
        const std::function<void()>& ready = {}) {
  PageBuffer buffer = PageBuffer::allocate(size).value();
  Result<ShardCache::Got> got = cache.get(key, buffer.span().first(size), fill, ready);
  return {std::move(got), std::vector<uint8_t>(buffer.data(), buffer.data() + size)};
}

// The files in the cache directory other than the cache-wide ones (lock and recorded limit).
std::set<std::string> data_files(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n != ".cache.lock" && n != ".limit") out.insert(n);
  }
  return out;
}

void set_last_used(const std::string& path, int64_t seconds) {
  const struct timespec times[2] = {{0, UTIME_OMIT}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

std::shared_ptr<ShardCache> open_cache(const fs::path& dir, uint64_t limit = 0) {
  auto cache = ShardCache::open({.dir = dir.string(), .limit_bytes = limit});
  EXPECT_TRUE(cache.is_ok()) << cache.status().to_string();
  return cache.is_ok() ? *cache : nullptr;
}

TEST(ShardCacheTest, AMissFillsOnceThenHits) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path() / "c");
  std::atomic<int> calls = 0;
  Got first = get(*cache, "https://h/d/train-0001.tar", 5000, fill_with(pattern(5000, 1), &calls));
  ASSERT_TRUE(first.got.is_ok()) << first.got.status().to_string();
  EXPECT_EQ(*first.got, ShardCache::Got::kFilled);
  EXPECT_EQ(first.bytes, pattern(5000, 1));
  Got second = get(*cache, "https://h/d/train-0001.tar", 5000, fill_with(pattern(5000, 2), &calls));
  ASSERT_TRUE(second.got.is_ok()) << second.got.status().to_string();
  EXPECT_EQ(*second.got, ShardCache::Got::kHit);
  EXPECT_EQ(second.bytes, pattern(5000, 1));
  EXPECT_EQ(calls, 1);
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.bytes_fetched, 5000u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(cache->bytes(), ShardCache::entry_bytes(5000));
  EXPECT_EQ(ShardCache::entry_bytes(5000), 5016u);  // the bytes and their checksum trailer
  // The entry's name: a readable tail of the key and its hash; no temp file is left.
  const std::string path = cache->entry_path("https://h/d/train-0001.tar");
  EXPECT_NE(path.find("h_d_train-0001_tar-"), std::string::npos) << path;
  EXPECT_EQ(data_files(dir.path() / "c"),
            (std::set<std::string>{fs::path(path).filename().string(), fs::path(path).stem().string() + ".key"}));
}

TEST(ShardCacheTest, ReadyRunsOnceTheBytesAreGoodBeforeTheEntryIsWritten) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  bool entry_at_ready = true;
  Got got = get(*cache, "k", 100, fill_with(pattern(100, 1), &calls),
                [&] { entry_at_ready = fs::exists(cache->entry_path("k")); });
  ASSERT_TRUE(got.got.is_ok());
  EXPECT_FALSE(entry_at_ready);
  EXPECT_TRUE(fs::exists(cache->entry_path("k")));
}

TEST(ShardCacheTest, AnEntryOfAnotherSizeIsRefetched) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  ASSERT_TRUE(get(*cache, "k", 100, fill_with(pattern(100, 1), &calls)).got.is_ok());
  Got again = get(*cache, "k", 200, fill_with(pattern(200, 2), &calls));
  ASSERT_TRUE(again.got.is_ok()) << again.got.status().to_string();
  EXPECT_EQ(again.bytes, pattern(200, 2));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache->bytes(), ShardCache::entry_bytes(200));
  EXPECT_EQ(cache->list().size(), 1u);
}

TEST(ShardCacheTest, AnEntryDamagedOnDiskIsReportedRemovedAndFilledAgain) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  ASSERT_TRUE(get(*cache, "https://h/t.tar#e#8192", 8192, fill_with(pattern(8192, 5), &calls)).got.is_ok());
  // One byte flips on disk: same size, other bytes.
  const std::string path = cache->entry_path("https://h/t.tar#e#8192");
  {
    const int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const uint8_t x = 0xAB;
    ASSERT_EQ(::pwrite(fd, &x, 1, 4000), 1);
    ::close(fd);
  }
  ::testing::internal::CaptureStderr();
  Got again = get(*cache, "https://h/t.tar#e#8192", 8192, fill_with(pattern(8192, 5), &calls));
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(again.got.is_ok()) << again.got.status().to_string();
  EXPECT_EQ(*again.got, ShardCache::Got::kFilled);
  EXPECT_EQ(again.bytes, pattern(8192, 5));  // never the damaged bytes
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache->stats().damaged, 1u);
  EXPECT_NE(said.find("the cache entry " + path + " fails its checksum"), std::string::npos) << said;
  EXPECT_NE(said.find("https://h/t.tar#e#8192"), std::string::npos) << said;
  // The entry written again is good: a hit.
  Got hit = get(*cache, "https://h/t.tar#e#8192", 8192, fill_with(pattern(8192, 6), &calls));
  ASSERT_TRUE(hit.got.is_ok());
  EXPECT_EQ(*hit.got, ShardCache::Got::kHit);
  EXPECT_EQ(hit.bytes, pattern(8192, 5));
}

TEST(ShardCacheTest, AFileWithoutAChecksumIsNotAnEntry) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  // An older chute's entry (the bytes alone), or one of the right total size and no trailer.
  dir.write(fs::path(cache->entry_path("k")).filename().string(), pattern(100 + 16, 1));
  std::atomic<int> calls = 0;
  Got got = get(*cache, "k", 100, fill_with(pattern(100, 2), &calls));
  ASSERT_TRUE(got.got.is_ok()) << got.got.status().to_string();
  EXPECT_EQ(*got.got, ShardCache::Got::kFilled);
  EXPECT_EQ(got.bytes, pattern(100, 2));
  EXPECT_EQ(cache->stats().damaged, 0u);
}

TEST(ShardCacheTest, AFillErrorNamesTheKeyAndLeavesNothing) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path() / "c");
  const std::string key = "s3://bucket/shard-7.tar@etag\"x\"";
  // The fill fails after writing part of the object.
  Got failed = get(*cache, key, 100, [](std::span<uint8_t> dst) {
    std::fill(dst.begin(), dst.begin() + 40, 1);
    return io_error("connection reset after 40 bytes");
  });
  ASSERT_FALSE(failed.got.is_ok());
  EXPECT_EQ(failed.got.status().code(), StatusCode::kIoError);
  EXPECT_EQ(failed.got.status().message(), "cache fill of '" + key + "' failed: connection reset after 40 bytes");
  EXPECT_TRUE(data_files(dir.path() / "c").empty());
  // A fill that throws: the key's lock goes with the stack.
  const ShardCache::Fill throws = [&](std::span<uint8_t>) -> Status { throw std::runtime_error("boom"); };
  EXPECT_THROW(get(*cache, key, 100, throws), std::runtime_error);
  EXPECT_TRUE(data_files(dir.path() / "c").empty());
  // The key is not stuck: the next get fills it.
  std::atomic<int> calls = 0;
  Got ok = get(*cache, key, 100, fill_with(pattern(100, 4), &calls));
  ASSERT_TRUE(ok.got.is_ok()) << ok.got.status().to_string();
  EXPECT_EQ(cache->list().at(0).key, key);
  EXPECT_EQ(cache->stats().bytes_fetched, 100u);
}

TEST(ShardCacheTest, TheLimitEvictsLeastRecentlyUsedFirst) {
  testing::TempDir dir;
  const uint64_t entry = ShardCache::entry_bytes(100);
  auto cache = open_cache(dir.path(), 3 * entry);
  std::atomic<int> calls = 0;
  for (const char* key : {"a", "b", "c"})
    ASSERT_TRUE(get(*cache, key, 100, fill_with(pattern(100, key[0]), &calls)).got.is_ok());
  EXPECT_EQ(cache->bytes(), 3 * entry);
  set_last_used(cache->entry_path("a"), 1000);
  set_last_used(cache->entry_path("b"), 2000);
  set_last_used(cache->entry_path("c"), 3000);
  // A hit makes "a" the most recently used: "b" is now the oldest.
  ASSERT_TRUE(get(*cache, "a", 100, fill_with(pattern(100, 'a'), &calls)).got.is_ok());
  ASSERT_TRUE(get(*cache, "d", 100, fill_with(pattern(100, 'd'), &calls)).got.is_ok());
  std::vector<std::string> keys;
  for (const CacheEntry& e : cache->list()) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(cache->bytes(), 3 * entry);
  EXPECT_EQ(cache->stats().evictions, 1u);
  // Two entries must go for one twice as large: the two least recently used, "c" (3000 s) and "d" (4000 s).
  set_last_used(cache->entry_path("a"), 5000);
  set_last_used(cache->entry_path("d"), 4000);
  ASSERT_TRUE(get(*cache, "e", 216, fill_with(pattern(216, 'e'), &calls)).got.is_ok());
  keys.clear();
  for (const CacheEntry& e : cache->list()) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"e", "a"}));  // most recently used first
  EXPECT_EQ(cache->bytes(), 3 * entry);
  EXPECT_EQ(cache->stats().evictions, 3u);
  EXPECT_EQ(ShardCache::recorded_limit(dir.path().string()), 3 * entry);
}

TEST(ShardCacheTest, AnEntryLargerThanTheLimitIsKeptAlone) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path(), 100);
  std::atomic<int> calls = 0;
  ASSERT_TRUE(get(*cache, "small", 60, fill_with(pattern(60, 1), &calls)).got.is_ok());
  Got big = get(*cache, "big", 500, fill_with(pattern(500, 2), &calls));
  ASSERT_TRUE(big.got.is_ok());
  EXPECT_EQ(big.bytes, pattern(500, 2));
  ASSERT_EQ(cache->list().size(), 1u);
  EXPECT_EQ(cache->list()[0].key, "big");
  EXPECT_EQ(cache->bytes(), ShardCache::entry_bytes(500));
  // The next insert evicts it.
  ASSERT_TRUE(get(*cache, "next", 50, fill_with(pattern(50, 3), &calls)).got.is_ok());
  ASSERT_EQ(cache->list().size(), 1u);
  EXPECT_EQ(cache->list()[0].key, "next");
}

TEST(ShardCacheTest, ListShowsKeysVerbatimAndClearRemovesEverything) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path() / "c");
  const std::vector<std::string> keys = {"s3://b/x/../y z.tar", std::string(300, 'k') + "/tail.tar", "héllo\n?*", "",
                                         "."};
  std::atomic<int> calls = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    ASSERT_TRUE(get(*cache, keys[i], 10 + i, fill_with(pattern(10 + i, 1), &calls)).got.is_ok());
  std::vector<CacheEntry> entries = cache->list();
  ASSERT_EQ(entries.size(), keys.size());
  std::set<std::string> listed, paths;
  for (const CacheEntry& e : entries) {
    listed.insert(e.key);
    paths.insert(e.path);
    EXPECT_EQ(e.path, cache->entry_path(e.key));
    EXPECT_EQ(fs::file_size(e.path), e.size);
    EXPECT_GT(e.last_used_ns, 0);
    // One path component, no dot before the suffix.
    const std::string file = fs::path(e.path).filename().string();
    EXPECT_EQ(file.find('.'), file.size() - 6) << file;
  }
  EXPECT_EQ(listed, std::set<std::string>(keys.begin(), keys.end()));
  EXPECT_EQ(paths.size(), keys.size());
  ASSERT_TRUE(cache->clear().is_ok());
  EXPECT_TRUE(cache->list().empty());
  EXPECT_EQ(cache->bytes(), 0u);
  // Only the cache-wide lock remains.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path() / "c")) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{".cache.lock"});
}

TEST(ShardCacheTest, ThreadsAskingForOneKeyShareOneFill) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  std::vector<std::future<Got>> results;
  for (int t = 0; t < 8; ++t)
    results.push_back(std::async(std::launch::async,
                                 [&] { return get(*cache, "one", 1 << 20, fill_with(pattern(1 << 20, 7), &calls)); }));
  for (auto& r : results) {
    ASSERT_EQ(r.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    Got got = r.get();
    ASSERT_TRUE(got.got.is_ok()) << got.got.status().to_string();
    EXPECT_EQ(got.bytes, pattern(1 << 20, 7));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache->stats().misses, 1u);
  EXPECT_EQ(cache->stats().hits, 7u);
}

TEST(ShardCacheTest, ClearSparesAKeyBeingFilledAndAWaiterThenHits) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path() / "c");
  std::promise<void> started, go;
  std::shared_future<void> go_future = go.get_future().share();
  std::atomic<int> calls = 0;
  auto filler = std::async(std::launch::async, [&] {
    return get(*cache, "slow", 64, [&](std::span<uint8_t> dst) {
      ++calls;
      started.set_value();
      if (go_future.wait_for(std::chrono::seconds(120)) != std::future_status::ready)
        return io_error("the test never released the fill");
      const auto bytes = pattern(64, 1);
      std::copy(bytes.begin(), bytes.end(), dst.begin());
      return Status::ok();
    });
  });
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
  ASSERT_TRUE(cache->clear().is_ok());
  bool lock = false;  // the fill's lock survives clear()
  for (const std::string& f : data_files(dir.path() / "c")) lock |= f.ends_with(".lock");
  EXPECT_TRUE(lock);
  go.set_value();
  ASSERT_EQ(filler.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  Got filled = filler.get();
  ASSERT_TRUE(filled.got.is_ok()) << filled.got.status().to_string();
  Got hit = get(*cache, "slow", 64, fill_with(pattern(64, 2), &calls));
  ASSERT_TRUE(hit.got.is_ok());
  EXPECT_EQ(hit.bytes, pattern(64, 1));
  EXPECT_EQ(calls, 1);
}

TEST(ShardCacheTest, StaleTempFilesOfDeadFillersAreSwept) {
  testing::TempDir dir;
  const fs::path c = dir.path() / "c";
  auto cache = open_cache(c);
  const std::string base = fs::path(cache->entry_path("k")).replace_extension().string();
  // What kill -9 mid-fill leaves: a partial temp file of a pid that is gone.
  dir.write("c/" + fs::path(base).filename().string() + ".999999999-00000000deadbeef.tmp", pattern(30, 1));
  ASSERT_EQ(data_files(c).size(), 1u);
  dir.write("c/.limit.999999999-00000000deadbeef.tmp", pattern(3, 1));  // and of the recorded limit
  auto reopened = open_cache(c);  // open() sweeps temps whose key no one is filling
  EXPECT_TRUE(data_files(c).empty());
  EXPECT_FALSE(fs::exists(c / ".limit.999999999-00000000deadbeef.tmp"));
  dir.write("c/" + fs::path(base).filename().string() + ".999999999-00000000deadbeef.tmp", pattern(30, 1));
  std::atomic<int> calls = 0;
  ASSERT_TRUE(get(*cache, "k", 50, fill_with(pattern(50, 1), &calls)).got.is_ok());  // so does a fill
  EXPECT_EQ(data_files(c).size(), 2u);                                               // the entry and its key
  dir.write("c/" + fs::path(base).filename().string() + ".999999999-00000000deadbeef.tmp", pattern(30, 1));
  ASSERT_TRUE(cache->clear().is_ok());  // and clear()
  EXPECT_TRUE(data_files(c).empty());
}

TEST(ShardCacheTest, AnUnwritableDirectoryIsAClearError) {
  testing::TempDir dir;
  dir.write("file", pattern(4, 1));
  const std::string bad = (dir.path() / "file" / "cache").string();
  auto cache = ShardCache::open({.dir = bad});
  ASSERT_FALSE(cache.is_ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kIoError);
  EXPECT_NE(cache.status().message().find("cannot create the cache directory " + bad), std::string::npos)
      << cache.status().message();
  EXPECT_EQ(ShardCache::open({.dir = ""}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardCacheTest, AForkedChildDoesNotKeepItsParentsKeyLocked) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "k.lock").string();
  auto lock = detail::FileLock::acquire(path, /*wait=*/true);
  ASSERT_TRUE(lock.is_ok() && lock->held());
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // e.g. a DataLoader worker forked while a thread fills: it lives on after the fill
    ::alarm(120);    // bounded, whatever happens to the parent
    ::close(to_child[1]);
    ::close(from_child[0]);
    char c = 'r';  // running: the fork handlers have run
    [[maybe_unused]] ssize_t n = ::write(from_child[1], &c, 1);
    n = ::read(to_child[0], &c, 1);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  ::close(to_child[0]);
  ::close(from_child[1]);
  char c = 0;
  ASSERT_EQ(::read(from_child[0], &c, 1), 1);
  *lock = detail::FileLock();  // the parent's fill ends
  auto next = detail::FileLock::acquire(path, /*wait=*/false);
  ASSERT_TRUE(next.is_ok());
  EXPECT_TRUE(next->held());  // the child's copy of the descriptor does not hold it
  ::close(to_child[1]);       // the child exits
  ::close(from_child[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace chute
