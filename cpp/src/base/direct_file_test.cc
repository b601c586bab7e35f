#include "chute/base/direct_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "chute/base/buffer_pool.h"
#include "test_util.h"

namespace chute {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(DirectFileTest, WritesAndReadsBackHeadAndTailOfAnySize) {
  testing::TempDir dir;
  // Aligned heads (a PageBuffer's) of sizes around the block, and an unaligned one (plain I/O).
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{3 * 4096 + 100}}) {
    PageBuffer buffer = PageBuffer::allocate(size).value();
    const std::vector<uint8_t> want = pattern(size, static_cast<uint8_t>(size));
    std::copy(want.begin(), want.end(), buffer.data());
    const std::vector<uint8_t> tail = pattern(16, 7);
    const std::string path = (dir.path() / ("f" + std::to_string(size))).string();
    ASSERT_TRUE(write_file_direct(path, buffer.span().first(size), tail).is_ok()) << size;
    std::vector<uint8_t> whole = want;
    whole.insert(whole.end(), tail.begin(), tail.end());
    EXPECT_EQ(file_bytes(path), whole) << size;

    PageBuffer back = PageBuffer::allocate(size).value();
    std::vector<uint8_t> tail_back(16);
    auto read = read_file_direct(path, back.span().first(size), tail_back);
    ASSERT_TRUE(read.is_ok() && *read) << size;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), back.data())) << size;
    EXPECT_EQ(tail_back, tail);
    // Another size is not this file: false, nothing read.
    auto other = read_file_direct(path, back.span().first(size), std::span<uint8_t>(tail_back).first(8));
    ASSERT_TRUE(other.is_ok());
    EXPECT_FALSE(*other);
  }
  std::vector<uint8_t> unaligned = pattern(5000, 3);
  const std::string path = (dir.path() / "plain").string();
  ASSERT_TRUE(write_file_direct(path, std::span<const uint8_t>(unaligned).subspan(1), {}).is_ok());
  EXPECT_EQ(file_bytes(path), std::vector<uint8_t>(unaligned.begin() + 1, unaligned.end()));
}

TEST(DirectFileTest, AMissingFileIsFalseAndAnExistingOneIsNotOverwritten) {
  testing::TempDir dir;
  PageBuffer b = PageBuffer::allocate(10).value();
  auto missing = read_file_direct((dir.path() / "none").string(), b.span().first(10), {});
  ASSERT_TRUE(missing.is_ok());
  EXPECT_FALSE(*missing);
  const std::string path = (dir.path() / "x").string();
  ASSERT_TRUE(write_file_direct(path, b.span().first(10), {}).is_ok());
  EXPECT_FALSE(write_file_direct(path, b.span().first(10), {}).is_ok());  // O_EXCL
}

}  // namespace
}  // namespace chute
