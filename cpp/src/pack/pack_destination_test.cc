#include "pack/detail/pack_destination.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "chute/io/packed_source.h"
#include "chute/pack/pack_writer.h"
#include "test_util.h"

namespace chute {
namespace {

using detail::PackDestination;
using Role = PackDestination::Role;
namespace fs = std::filesystem;

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

testing::MemorySource jpegs(int n) {
  std::vector<std::vector<uint8_t>> items;
  for (int i = 0; i < n; ++i) items.push_back(testing::encode_jpeg(testing::synthetic_rgb(48, 40, i), 48, 40));
  return testing::MemorySource(std::move(items), 3);
}

// The names a killed run leaves, one of each kind chute writes, and files that only look like chute's.
void plant_a_killed_run_and_look_alikes(const testing::TempDir& dir, const std::string& sub) {
  for (const char* name : {"shard-00000.chute.tmp-4000000-17", "index.chidx.tmp-4000000-18",
                           "part-00001-shard-00002.chute.tmp-4000001-3", "part-00002-of-00004.chidx.tmp-4000001-9",
                           "shard-00000.chute", "shard-00007.chute", "part-00003-shard-00000.chute"})
    dir.write(sub + "/" + name, {1, 2, 3});
  for (const char* name :
       {"notes.txt", "shard-00001.chute.bak", "shard-1.chute", "myshard-00000.chute", "shard-00000.chute.tmp",
        "shard-00000.chute.tmp-abc-1", "photo.jpg.tmp-4000000-1", "index.chidx.old"})
    dir.write(sub + "/" + name, {4, 5});
}

const std::set<std::string> kLookAlikes = {"notes.txt",
                                           "shard-00001.chute.bak",
                                           "shard-1.chute",
                                           "myshard-00000.chute",
                                           "shard-00000.chute.tmp",
                                           "shard-00000.chute.tmp-abc-1",
                                           "photo.jpg.tmp-4000000-1",
                                           "index.chidx.old"};

TEST(PackDestinationTest, RemovesWhatAKilledRunLeftAndNothingThatIsNotChutes) {
  testing::TempDir dir;
  plant_a_killed_run_and_look_alikes(dir, "d");
  fs::create_directory(dir.path() / "d" / "shard-00009.chute");  // a folder, whatever its name
  auto destination = PackDestination::lock((dir.path() / "d").string(), Role::kWholePack, "chute pack");
  ASSERT_TRUE(destination.is_ok()) << destination.status().to_string();
  auto removed = destination->remove_leftovers();
  ASSERT_TRUE(removed.is_ok()) << removed.status().to_string();
  EXPECT_EQ(*removed, 7);
  std::set<std::string> expected = kLookAlikes;
  expected.insert({PackDestination::kLockFileName, "shard-00009.chute"});
  EXPECT_EQ(entries(dir.path() / "d"), expected);
  destination->release();  // the exclusive holder takes its lock file with it
  expected.erase(PackDestination::kLockFileName);
  EXPECT_EQ(entries(dir.path() / "d"), expected);
}

TEST(PackDestinationTest, KeepsTheShardsAnIndexListsAndAllShardsWhenAnIndexDoesNotParse) {
  testing::TempDir dir;
  const fs::path d = dir.path() / "d";
  const testing::MemorySource source = jpegs(12);
  // Part 0 of 2 finished (its part index lists its shards); part 1 was killed after renaming a shard.
  auto part = pack(source, {}, {.dst = d.string(), .shard_size = 4096, .num_threads = 2, .part = 0, .parts = 2});
  ASSERT_TRUE(part.is_ok()) << part.status().to_string();
  ASSERT_GT(part->shards, 1);
  std::set<std::string> part0 = entries(d);
  part0.erase(PackDestination::kLockFileName);  // a part leaves it; the whole pack below takes it away
  dir.write("d/part-00001-shard-00000.chute", {1});
  {
    auto destination = PackDestination::lock(d.string(), Role::kWholePack, "chute pack");
    ASSERT_TRUE(destination.is_ok()) << destination.status().to_string();
    EXPECT_EQ(*destination->remove_leftovers(), 1);
  }
  EXPECT_EQ(entries(d), part0);  // the part index and every shard it lists

  dir.write("d/index.chidx", {'n', 'o', 't'});  // an index whose list cannot be read
  dir.write("d/shard-00004.chute", {1});
  auto destination = PackDestination::lock(d.string(), Role::kWholePack, "chute pack");
  ASSERT_TRUE(destination.is_ok());
  EXPECT_EQ(*destination->remove_leftovers(), 0);
}

TEST(PackDestinationTest, ASecondWholePackIsRefusedNamingTheFirstAndPartsShareTheLock) {
  testing::TempDir dir;
  const std::string d = dir.path().string();
  auto first = PackDestination::lock(d, Role::kWholePack, "chute pack");
  ASSERT_TRUE(first.is_ok());
  for (Role role : {Role::kWholePack, Role::kPart}) {
    auto second = PackDestination::lock(d, role, "chute pack");
    ASSERT_FALSE(second.is_ok());
    EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(second.status().message().find(d + " is being written by chute pack (pid " + std::to_string(getpid())),
              std::string::npos)
        << second.status().message();
  }
  first->release();

  auto part0 = PackDestination::lock(d, Role::kPart, "chute pack part 0 of 2");
  auto part1 = PackDestination::lock(d, Role::kPart, "chute pack part 1 of 2");
  ASSERT_TRUE(part0.is_ok() && part1.is_ok());  // parts are written side by side
  auto whole = PackDestination::lock(d, Role::kWholePack, "chute pack");
  ASSERT_FALSE(whole.is_ok());
  EXPECT_NE(whole.status().message().find("is being written by chute pack part 1 of 2 (pid"), std::string::npos)
      << whole.status().message();
  EXPECT_FALSE(part0->try_exclusive());  // part 1 still writes; part 0's lock is now released
  EXPECT_TRUE(part1->try_exclusive());
  part1->release();
  EXPECT_EQ(entries(dir.path()), std::set<std::string>{});
}

TEST(PackDestinationTest, PackRemovesAKilledRunsFilesAndRefusesASecondPackWhileItRuns) {
  testing::TempDir dir;
  const fs::path d = dir.path() / "d";
  plant_a_killed_run_and_look_alikes(dir, "d");
  const testing::MemorySource source = jpegs(12);
  Status second_pack;
  bool asked = false;
  auto result = pack(source, {}, {.dst = d.string(), .shard_size = 4096, .num_threads = 2}, [&](const PackProgress&) {
    if (!asked) {  // a second pack into d while this one runs
      asked = true;
      second_pack = pack(source, {}, {.dst = d.string(), .num_threads = 1}).status();
    }
    return true;
  });
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  ASSERT_TRUE(asked);
  EXPECT_EQ(second_pack.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(second_pack.message().find("is being written by chute pack (pid"), std::string::npos)
      << second_pack.message();

  std::set<std::string> expected = kLookAlikes;
  expected.insert(kIndexFileName);
  for (int i = 0; i < result->shards; ++i) expected.insert(shard_file_name(0, 1, i));
  EXPECT_EQ(entries(d), expected);
  auto packed = PackedSource::open(d.string());
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  EXPECT_EQ((*packed)->size(), 12);
}

TEST(PackDestinationTest, MergeRemovesTheKilledAttemptsFilesAndTheLockFile) {
  testing::TempDir dir;
  const fs::path d = dir.path() / "d";
  const testing::MemorySource source = jpegs(12);
  std::set<std::string> expected = {kIndexFileName, "notes.txt"};
  for (int p = 0; p < 2; ++p) {
    auto part = pack(source, {}, {.dst = d.string(), .shard_size = 4096, .num_threads = 1, .part = p, .parts = 2});
    ASSERT_TRUE(part.is_ok()) << part.status().to_string();
    for (int i = 0; i < part->shards; ++i) expected.insert(shard_file_name(p, 2, i));
  }
  dir.write("d/part-00001-shard-00009.chute.tmp-4000000-1", {1});  // a killed attempt of part 1
  dir.write("d/part-00005-shard-00000.chute", {1});                // a killed earlier run with more parts
  dir.write("d/notes.txt", {1});
  auto merged = merge_parts(d.string());
  ASSERT_TRUE(merged.is_ok()) << merged.status().to_string();
  EXPECT_EQ(entries(d), expected);  // the part indexes went into the index; the lock file went with the merge
  auto packed = PackedSource::open(d.string());
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  EXPECT_EQ((*packed)->size(), 12);
}

}  // namespace
}  // namespace chute
