#include "chute/remote/object_fetch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <latch>
#include <thread>

#include "chute/remote/cache_key.h"
#include "test_util.h"

namespace chute {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;
namespace fs = std::filesystem;

std::shared_ptr<ObjectStore> local_store() {
  auto store = ObjectStore::create(nullptr, {}, [](const std::string&) -> Result<std::optional<std::string>> {
    return std::optional<std::string>();
  });
  EXPECT_TRUE(store.is_ok()) << store.status().to_string();
  return store.value();
}

std::shared_ptr<ShardCache> open_cache(const fs::path& dir) {
  auto cache = ShardCache::open({.dir = dir.string()});
  EXPECT_TRUE(cache.is_ok()) << cache.status().to_string();
  return cache.value();
}

// n objects of different sizes and contents under dir/objects; their paths (local "URLs").
std::vector<std::string> make_objects(const TempDir& dir, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> bytes(static_cast<size_t>(100 + 37 * i));
    for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(i * 13 + j);
    const std::string name = "objects/o" + std::to_string(i) + ".tar";
    dir.write(name, bytes);
    out.push_back((dir.path() / name).string());
  }
  return out;
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// What /proc shows for this process's threads: their names.
std::vector<std::string> thread_names() {
  std::vector<std::string> out;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) out.push_back(name);
  }
  return out;
}

TEST(ObjectFetchTest, FetchesEveryObjectIntoTheCacheInOrder) {
  TempDir dir;
  const auto urls = make_objects(dir, 5);
  auto store = local_store();
  auto cache = open_cache(dir.path() / "cache");
  auto fetch = ObjectFetch::start(store, cache, urls, {.threads = 3});
  ASSERT_TRUE(fetch.is_ok()) << fetch.status().to_string();
  auto paths = (*fetch)->wait(60s);
  ASSERT_TRUE(paths.is_ok()) << paths.status().to_string();
  ASSERT_EQ(paths->size(), urls.size());
  for (size_t i = 0; i < urls.size(); ++i) {
    EXPECT_EQ(slurp((*paths)[i]), slurp(urls[i])) << i;
    EXPECT_NE((*paths)[i], urls[i]);  // the cache's copy
    auto info = store->stat(urls[i]);
    ASSERT_TRUE(info.is_ok());
    EXPECT_EQ(cache->entry_path(cache_key(*info)), (*paths)[i]) << "keyed by cache_key()";
  }
  EXPECT_EQ(cache->stats().misses, 5u);

  // Fetched again: every object is a hit.
  auto again = ObjectFetch::start(store, cache, urls, {.threads = 2});
  ASSERT_TRUE(again.is_ok());
  auto second = (*again)->wait(60s);
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(*second, *paths);
  EXPECT_EQ(cache->stats().hits, 5u);
}

TEST(ObjectFetchTest, AFailureNamesItsObjectAndStopsTheRest) {
  TempDir dir;
  auto urls = make_objects(dir, 3);
  urls.insert(urls.begin(), (dir.path() / "objects" / "missing.tar").string());
  auto cache = open_cache(dir.path() / "cache");
  auto fetch = ObjectFetch::start(local_store(), cache, urls, {.threads = 1});
  ASSERT_TRUE(fetch.is_ok());
  auto paths = (*fetch)->wait(60s);
  ASSERT_FALSE(paths.is_ok());
  EXPECT_NE(paths.status().message().find("missing.tar"), std::string::npos) << paths.status().to_string();
  EXPECT_TRUE(cache->list().empty()) << "one thread, the first object failed: nothing else was fetched";
}

TEST(ObjectFetchTest, NoObjectsIsNoThreadAndNoPath) {
  TempDir dir;
  auto fetch = ObjectFetch::start(local_store(), open_cache(dir.path() / "cache"), {}, {});
  ASSERT_TRUE(fetch.is_ok());
  auto paths = (*fetch)->wait(0ms);
  ASSERT_TRUE(paths.is_ok());
  EXPECT_TRUE(paths->empty());
  EXPECT_EQ(ObjectFetch::start(local_store(), open_cache(dir.path() / "cache"), {}, {.threads = 0}).status().code(),
            StatusCode::kInvalidArgument);
}

// The fetch's thread is held inside its first object: this test fills that object's cache key first and
// keeps the key's lock until told, so the fetch waits on the lock (as it would on another process's fill).
TEST(ObjectFetchTest, ItsThreadsAreNamedAndCancelStartsNothingMore) {
  TempDir dir;
  const auto urls = make_objects(dir, 3);
  auto store = local_store();
  auto cache = open_cache(dir.path() / "cache");
  auto first = store->stat(urls[0]);
  ASSERT_TRUE(first.is_ok());

  std::latch filling(1), release(1);
  std::thread holder([&] {
    auto held = cache->get(cache_key(*first), first->size,
                           [&](int fd) {
                             filling.count_down();
                             release.wait();
                             return store->download(*first, fd);
                           },
                           {});
    EXPECT_TRUE(held.is_ok()) << held.status().to_string();
  });
  filling.wait();

  auto fetch = ObjectFetch::start(store, cache, urls, {.threads = 1});
  ASSERT_TRUE(fetch.is_ok()) << fetch.status().to_string();
  // Its thread cannot finish the first object while the holder fills it.
  EXPECT_EQ((*fetch)->wait(0ms).status().code(), StatusCode::kDeadlineExceeded);
  const auto names = thread_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "chute-fetch"), 1);

  (*fetch)->cancel();
  release.count_down();
  holder.join();
  auto paths = (*fetch)->wait(60s);
  EXPECT_EQ(paths.status().code(), StatusCode::kCancelled) << paths.status().to_string();
  for (size_t i = 1; i < urls.size(); ++i) {
    auto info = store->stat(urls[i]);
    ASSERT_TRUE(info.is_ok());
    auto entry = cache->peek(cache_key(*info), info->size);
    ASSERT_TRUE(entry.is_ok());
    EXPECT_EQ(*entry, nullptr) << "object " << i << " started after cancel()";
  }
  fetch->reset();  // joined: no thread left behind
  const auto after = thread_names();
  EXPECT_EQ(std::count(after.begin(), after.end(), "chute-fetch"), 0);
}

TEST(ObjectFetchTest, DestroyingAFetchInFlightCancelsAndJoins) {
  TempDir dir;
  const auto urls = make_objects(dir, 4);
  auto cache = open_cache(dir.path() / "cache");
  {
    auto fetch = ObjectFetch::start(local_store(), cache, urls, {.threads = 2});
    ASSERT_TRUE(fetch.is_ok());
  }  // whatever it had fetched, its threads are gone and no entry is torn
  const auto names = thread_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "chute-fetch"), 0);
  for (const CacheEntry& e : cache->list()) EXPECT_FALSE(e.key.empty());
}

}  // namespace
}  // namespace chute
