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
#include <future>
#include <set>
#include <stdexcept>
#include <thread>

#include "base/detail/file_lock.h"
#include "test_util.h"

namespace chute {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

Status write_all(int fd, const std::vector<uint8_t>& data) {
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("write failed");
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

// A fill writing `data`, counting its calls.
ShardCache::Fill fill_with(std::vector<uint8_t> data, std::atomic<int>* calls) {
  return [data = std::move(data), calls](int fd) {
    ++*calls;
    return write_all(fd, data);
  };
}

// The format's check, as a test sees it: the bytes must be `pattern(size, seed)`.
ShardCache::Verify expect_pattern(uint8_t seed) {
  return [seed](const MappedFile& f) {
    const auto want = pattern(f.bytes().size(), seed);
    return std::equal(want.begin(), want.end(), f.bytes().begin()) ? Status::ok() : corrupt_data("bad checksum");
  };
}

std::vector<uint8_t> bytes_of(const MappedFile& f) { return {f.bytes().begin(), f.bytes().end()}; }

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
  auto first = cache->get("https://h/d/train-0001.tar", 5000, fill_with(pattern(5000, 1), &calls), expect_pattern(1));
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(bytes_of(**first), pattern(5000, 1));
  auto second = cache->get("https://h/d/train-0001.tar", 5000, fill_with(pattern(5000, 2), &calls), expect_pattern(1));
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ(bytes_of(**second), pattern(5000, 1));
  EXPECT_EQ(calls, 1);
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.bytes_fetched, 5000u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(cache->bytes(), 5000u);
  // The entry's name: a readable tail of the key and its hash; no temp file is left.
  const std::string path = cache->entry_path("https://h/d/train-0001.tar");
  EXPECT_EQ((*second)->path(), path);
  EXPECT_NE(path.find("h_d_train-0001_tar-"), std::string::npos) << path;
  EXPECT_EQ(data_files(dir.path() / "c"),
            (std::set<std::string>{fs::path(path).filename().string(), fs::path(path).stem().string() + ".key"}));
}

TEST(ShardCacheTest, PeekReturnsOnlyAnEntryOfThatSize) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  auto absent = cache->peek("k", 10);
  ASSERT_TRUE(absent.is_ok());
  EXPECT_EQ(*absent, nullptr);
  std::atomic<int> calls = 0;
  ASSERT_TRUE(cache->get("k", 10, fill_with(pattern(10, 3), &calls), nullptr).is_ok());
  auto present = cache->peek("k", 10);
  ASSERT_TRUE(present.is_ok());
  ASSERT_NE(*present, nullptr);
  EXPECT_EQ(bytes_of(**present), pattern(10, 3));
  auto other_size = cache->peek("k", 11);
  ASSERT_TRUE(other_size.is_ok());
  EXPECT_EQ(*other_size, nullptr);
  EXPECT_EQ(cache->stats().hits, 0u);  // peek counts neither
}

TEST(ShardCacheTest, AnEntryOfAnotherSizeIsRefetched) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  ASSERT_TRUE(cache->get("k", 100, fill_with(pattern(100, 1), &calls), nullptr).is_ok());
  auto again = cache->get("k", 200, fill_with(pattern(200, 2), &calls), nullptr);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(bytes_of(**again), pattern(200, 2));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache->bytes(), 200u);
  EXPECT_EQ(cache->list().size(), 1u);
}

TEST(ShardCacheTest, AnEntryFailingVerifyIsRemovedAndRefetched) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  auto first = cache->get("k", 4096, fill_with(pattern(4096, 5), &calls), expect_pattern(5));
  ASSERT_TRUE(first.is_ok());
  // The entry rots on disk (same size, other bytes), replaced by rename as chute itself would.
  const std::string path = cache->entry_path("k");
  dir.write("rotten", pattern(4096, 9));
  ASSERT_EQ(::rename((dir.path() / "rotten").c_str(), path.c_str()), 0);
  EXPECT_EQ(bytes_of(**first), pattern(4096, 5));  // the earlier mapping still reads the old bytes
  auto again = cache->get("k", 4096, fill_with(pattern(4096, 5), &calls), expect_pattern(5));
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(bytes_of(**again), pattern(4096, 5));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache->stats().misses, 2u);
  EXPECT_EQ(cache->stats().hits, 0u);
}

TEST(ShardCacheTest, ABadEntryWhoseRefetchFailsLeavesNothing) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path() / "c");
  std::atomic<int> calls = 0;
  ASSERT_TRUE(cache->get("k", 64, fill_with(pattern(64, 5), &calls), nullptr).is_ok());
  // The entry fails the check, and so do the bytes fetched again.
  auto failed = cache->get("k", 64, fill_with(pattern(64, 7), &calls), expect_pattern(6));
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(failed.status().message().find("cache fill of 'k': the fetched bytes fail verification: bad checksum"),
            std::string::npos)
      << failed.status().message();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(data_files(dir.path() / "c").empty());
  EXPECT_EQ(cache->list().size(), 0u);
}

TEST(ShardCacheTest, AFillErrorNamesTheKeyAndLeavesNothing) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path() / "c");
  const std::string key = "s3://bucket/shard-7.tar@etag\"x\"";
  // The fill fails after writing part of the shard.
  auto failed = cache->get(
      key, 100,
      [](int fd) {
        EXPECT_TRUE(write_all(fd, pattern(40, 1)).is_ok());
        return io_error("connection reset after 40 bytes");
      },
      nullptr);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIoError);
  EXPECT_EQ(failed.status().message(), "cache fill of '" + key + "' failed: connection reset after 40 bytes");
  EXPECT_TRUE(data_files(dir.path() / "c").empty());
  // A fill that writes the wrong number of bytes.
  std::atomic<int> calls = 0;
  failed = cache->get(key, 100, fill_with(pattern(99, 1), &calls), nullptr);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_NE(failed.status().message().find("cache fill of '" + key + "' wrote 99 bytes, expected 100"),
            std::string::npos)
      << failed.status().message();
  EXPECT_TRUE(data_files(dir.path() / "c").empty());
  // A fill that throws: its temp file, its descriptor and the key's lock go with the stack.
  int thrown_fd = -1;
  const ShardCache::Fill throws = [&](int fd) -> Status {
    thrown_fd = fd;
    throw std::runtime_error("boom");
  };
  EXPECT_THROW(cache->get(key, 100, throws, nullptr), std::runtime_error);
  ASSERT_GE(thrown_fd, 0);
  EXPECT_EQ(::fcntl(thrown_fd, F_GETFD), -1);  // closed
  EXPECT_TRUE(data_files(dir.path() / "c").empty());
  // The key is not stuck: the next get fills it.
  auto ok = cache->get(key, 100, fill_with(pattern(100, 4), &calls), nullptr);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(cache->list().at(0).key, key);
  EXPECT_EQ(cache->stats().bytes_fetched, 100u);
}

TEST(ShardCacheTest, TheLimitEvictsLeastRecentlyUsedFirst) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path(), 300);
  std::atomic<int> calls = 0;
  for (const char* key : {"a", "b", "c"})
    ASSERT_TRUE(cache->get(key, 100, fill_with(pattern(100, key[0]), &calls), nullptr).is_ok());
  EXPECT_EQ(cache->bytes(), 300u);
  set_last_used(cache->entry_path("a"), 1000);
  set_last_used(cache->entry_path("b"), 2000);
  set_last_used(cache->entry_path("c"), 3000);
  // A hit makes "a" the most recently used: "b" is now the oldest.
  ASSERT_TRUE(cache->get("a", 100, fill_with(pattern(100, 'a'), &calls), nullptr).is_ok());
  ASSERT_TRUE(cache->get("d", 100, fill_with(pattern(100, 'd'), &calls), nullptr).is_ok());
  std::vector<std::string> keys;
  for (const CacheEntry& e : cache->list()) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(cache->bytes(), 300u);
  EXPECT_EQ(cache->stats().evictions, 1u);
  // Two entries must go for one of 200 bytes: the two least recently used, "c" (3000 s) and "d" (4000 s).
  set_last_used(cache->entry_path("a"), 5000);
  set_last_used(cache->entry_path("d"), 4000);
  ASSERT_TRUE(cache->get("e", 200, fill_with(pattern(200, 'e'), &calls), nullptr).is_ok());
  keys.clear();
  for (const CacheEntry& e : cache->list()) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"e", "a"}));  // most recently used first
  EXPECT_EQ(cache->bytes(), 300u);
  EXPECT_EQ(cache->stats().evictions, 3u);
  EXPECT_EQ(ShardCache::recorded_limit(dir.path().string()), 300u);
}

TEST(ShardCacheTest, AnEntryLargerThanTheLimitIsKeptAlone) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path(), 100);
  std::atomic<int> calls = 0;
  ASSERT_TRUE(cache->get("small", 60, fill_with(pattern(60, 1), &calls), nullptr).is_ok());
  auto big = cache->get("big", 500, fill_with(pattern(500, 2), &calls), nullptr);
  ASSERT_TRUE(big.is_ok());
  EXPECT_EQ(bytes_of(**big), pattern(500, 2));
  ASSERT_EQ(cache->list().size(), 1u);
  EXPECT_EQ(cache->list()[0].key, "big");
  EXPECT_EQ(cache->bytes(), 500u);
  // The next insert evicts it.
  ASSERT_TRUE(cache->get("next", 50, fill_with(pattern(50, 3), &calls), nullptr).is_ok());
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
    ASSERT_TRUE(cache->get(keys[i], 10 + i, fill_with(pattern(10 + i, 1), &calls), nullptr).is_ok());
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

TEST(ShardCacheTest, AnEntryRemovedWhileMappedStaysReadable) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path(), 1000);
  std::atomic<int> calls = 0;
  auto held = cache->get("held", 800, fill_with(pattern(800, 1), &calls), nullptr);
  ASSERT_TRUE(held.is_ok());
  ASSERT_TRUE(cache->get("next", 800, fill_with(pattern(800, 2), &calls), nullptr).is_ok());  // evicts "held"
  EXPECT_FALSE(fs::exists(cache->entry_path("held")));
  EXPECT_EQ(bytes_of(**held), pattern(800, 1));
  auto next = cache->peek("next", 800);
  ASSERT_TRUE(next.is_ok() && *next != nullptr);
  ASSERT_TRUE(cache->clear().is_ok());
  EXPECT_EQ(bytes_of(**next), pattern(800, 2));
  std::vector<uint8_t> copy(800);
  ASSERT_TRUE((*next)->copy(0, 800, copy.data()).is_ok());
  EXPECT_EQ(copy, pattern(800, 2));
}

TEST(ShardCacheTest, ThreadsAskingForOneKeyShareOneFill) {
  testing::TempDir dir;
  auto cache = open_cache(dir.path());
  std::atomic<int> calls = 0;
  std::vector<std::future<Result<std::shared_ptr<const MappedFile>>>> results;
  for (int t = 0; t < 8; ++t)
    results.push_back(std::async(std::launch::async, [&] {
      return cache->get("one", 1 << 20, fill_with(pattern(1 << 20, 7), &calls), expect_pattern(7));
    }));
  for (auto& r : results) {
    ASSERT_EQ(r.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    auto file = r.get();
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    EXPECT_EQ(bytes_of(**file), pattern(1 << 20, 7));
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
    return cache->get(
        "slow", 64,
        [&](int fd) {
          ++calls;
          started.set_value();
          if (go_future.wait_for(std::chrono::seconds(120)) != std::future_status::ready)
            return io_error("the test never released the fill");
          return write_all(fd, pattern(64, 1));
        },
        nullptr);
  });
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
  ASSERT_TRUE(cache->clear().is_ok());
  // The fill's temp file survives clear().
  bool temp = false;
  for (const std::string& f : data_files(dir.path() / "c")) temp |= f.ends_with(".tmp");
  EXPECT_TRUE(temp);
  go.set_value();
  ASSERT_EQ(filler.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  auto filled = filler.get();
  ASSERT_TRUE(filled.is_ok()) << filled.status().to_string();
  auto hit = cache->get("slow", 64, fill_with(pattern(64, 2), &calls), nullptr);
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(bytes_of(**hit), pattern(64, 1));
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
  ASSERT_TRUE(cache->get("k", 50, fill_with(pattern(50, 1), &calls), nullptr).is_ok());  // so does a fill
  EXPECT_EQ(data_files(c).size(), 2u);                                                   // the entry and its key
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
