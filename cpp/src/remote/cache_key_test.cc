// The shard cache's one key format (cache_key.h) and its writers: a remote packed dataset's index and shards
// (io/packed_source.cc) and remote tars (io/tar_source.cc), all fetched through io/shard_stream.cc and
// remote/object_fetch.cc. Each writer's entries are found in the cache under exactly the key cache_key() gives.
#include "chute/remote/cache_key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "chute/io/packed_format.h"
#include "chute/io/packed_source.h"
#include "chute/io/tar_source.h"
#include "chute/pack/pack_writer.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::MemorySource;
using testing::TempDir;

TEST(CacheKeyTest, UrlWithoutCredentialsThenWhatNamesTheBytes) {
  EXPECT_EQ(cache_key(ObjectInfo{.url = "https://user:s3cret@host/data/a.tar", .size = 5, .etag = "e1"}),
            "https://***@host/data/a.tar#e1#5");
  EXPECT_EQ(cache_key(ObjectInfo{.url = "s3://b/k", .size = 0, .etag = ""}), "s3://b/k##0");
  EXPECT_EQ(cache_key("https://h/train/shard-0001.chute", 0xabcULL),
            "https://h/train/shard-0001.chute#0000000000000abc");
  // A changed object (another ETag or size, another shard id) is another key.
  EXPECT_NE(cache_key(ObjectInfo{.url = "s3://b/k", .size = 5, .etag = "e1"}),
            cache_key(ObjectInfo{.url = "s3://b/k", .size = 5, .etag = "e2"}));
  EXPECT_NE(cache_key("s3://b/k", 1), cache_key("s3://b/k", 2));
}

TEST(CacheKeyTest, EveryWriterFilesItsEntriesUnderTheOneFormat) {
  TempDir dir;
  std::vector<std::vector<uint8_t>> items;
  for (int i = 0; i < 40; ++i) items.emplace_back(static_cast<size_t>(200 + i), static_cast<uint8_t>(i));
  MemorySource src(items);
  PackOptions o;
  o.dst = (dir.path() / "packed").string();
  o.shard_size = 4096;
  o.num_threads = 1;
  o.check = ImageCheck::kNone;
  ASSERT_TRUE(pack(src, {}, o).is_ok());
  std::vector<uint8_t> tar_bytes;
  testing::add_tar_member(tar_bytes, "0.jpg", "JPEG");
  testing::add_tar_member(tar_bytes, "0.cls", "1");
  testing::end_tar(tar_bytes);
  dir.write("tars/a.tar", tar_bytes);

  auto store = ObjectStore::create(nullptr, {}, [](const std::string&) -> Result<std::optional<std::string>> {
    return std::optional<std::string>();
  });
  ASSERT_TRUE(store.is_ok());
  auto cache = ShardCache::open({.dir = (dir.path() / "cache").string()});
  ASSERT_TRUE(cache.is_ok());

  // The packed dataset through the remote path (local paths are objects too): its index, then each shard
  // as a read needs it.
  const std::string base = o.dst + "/";
  auto packed = PackedSource::open_remote(base, *store, *cache, {.fetch_threads = 1});
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < (*packed)->size(); ++i) ASSERT_TRUE((*packed)->read(i, out).is_ok()) << i;
  // A tar, streamed (to index it) and read.
  auto tars = (*store)->expand((dir.path() / "tars/a.tar").string());
  ASSERT_TRUE(tars.is_ok());
  auto tar_source = TarSource::open_remote(*tars, *store, *cache, {}, {.fetch_threads = 1});
  ASSERT_TRUE(tar_source.is_ok()) << tar_source.status().to_string();
  ASSERT_TRUE((*tar_source)->read(0, out).is_ok());

  std::set<std::string> want;
  auto index = (*store)->stat(base + kIndexFileName);
  ASSERT_TRUE(index.is_ok());
  want.insert(cache_key(*index));
  for (const ShardInfo& s : (*packed)->shards()) want.insert(cache_key(base + s.name, s.shard_id));
  auto tar = (*store)->stat((dir.path() / "tars/a.tar").string());
  ASSERT_TRUE(tar.is_ok());
  want.insert(cache_key(*tar));
  EXPECT_GT((*packed)->shards().size(), 2u);

  // A shard's cache write follows its readers (off their path): closing the sources lets the writes end.
  packed->reset();
  tar_source->reset();
  std::set<std::string> keys;
  for (const CacheEntry& e : (*cache)->list()) keys.insert(e.key);
  EXPECT_EQ(keys, want);
}

}  // namespace
}  // namespace chute
