#include "chute/base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "chute/io/packed_source.h"
#include "chute/pack/pack_writer.h"
#include "test_util.h"

namespace chute {
namespace {

TEST(MappedFileTest, ACopyOfPagesTruncatedAwayIsAnErrorNotASigbus) {
  testing::TempDir dir;
  dir.write("f.bin", std::vector<uint8_t>(64 * 1024, 9));
  const std::string path = (dir.path() / "f.bin").string();
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.is_ok());
  std::vector<uint8_t> out(4096);
  ASSERT_TRUE((*file)->copy(8192, 4096, out.data()).is_ok());
  EXPECT_EQ(out[0], 9);
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);  // someone else shrinks the file
  Status st = (*file)->copy(32768, 4096, out.data());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find(path + " shrank while in use"), std::string::npos) << st.message();
  EXPECT_TRUE((*file)->copy(0, 4096, out.data()).is_ok());  // what is still there still reads
  st = (*file)->copy(40960, 16, out.data());                // and the guard holds for the next fault too
  EXPECT_EQ(st.code(), StatusCode::kIoError);
}

TEST(MappedFileTest, AShardTruncatedWhileOpenGivesSampleErrorsNamingIt) {
  testing::TempDir dir;
  std::vector<std::vector<uint8_t>> items;
  for (int i = 0; i < 40; ++i) items.push_back(std::vector<uint8_t>(3000, static_cast<uint8_t>(i)));
  testing::MemorySource source(items);
  const std::string dst = (dir.path() / "p").string();
  PackOptions options;  // the payloads are not images: pack them unchecked
  options.dst = dst, options.num_threads = 1, options.check = ImageCheck::kNone;
  ASSERT_TRUE(pack(source, {}, options).is_ok());
  auto packed = PackedSource::open(dst);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  const std::string shard = dst + "/" + (*packed)->shards()[0].name;
  ASSERT_EQ(::truncate(shard.c_str(), 16384), 0);
  std::vector<uint8_t> out;
  ASSERT_TRUE((*packed)->read(1, out).is_ok());
  EXPECT_EQ(out, items[1]);
  Status st = (*packed)->read(30, out);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("shard " + shard + ", record 30"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("shrank while in use"), std::string::npos) << st.message();
  const auto bad = (*packed)->verify(0, 40);
  EXPECT_GE(bad.size(), 30u);  // every record past the cut, none before it
  EXPECT_EQ(bad.back().first, 39);
}

}  // namespace
}  // namespace chute
