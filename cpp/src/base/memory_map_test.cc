// mapping_of(): the mapping holding an address, and whether the memory there is still the same memory
// after the range was unmapped and something else mapped at the same address.
#include "chute/base/memory_map.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

namespace chute {
namespace {

constexpr size_t kBytes = 1 << 20;

int memfd(const char* name) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, 2 * kBytes), 0);
  return fd;
}

TEST(MemoryMapTest, SharedFileMappingsAreToldApartAfterARemap) {
  const int a = memfd("chute-test-a"), b = memfd("chute-test-b");
  auto* p = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0));
  ASSERT_NE(p, MAP_FAILED);
  auto before = mapping_of(p + 100);
  ASSERT_TRUE(before.is_ok()) << before.status().to_string();
  EXPECT_TRUE(before->shared && before->file_backed());
  EXPECT_LE(before->start, reinterpret_cast<uintptr_t>(p));
  EXPECT_GE(before->end, reinterpret_cast<uintptr_t>(p) + kBytes);
  EXPECT_NE(before->path.find("chute-test-a"), std::string::npos) << before->path;
  const auto at = reinterpret_cast<uintptr_t>(p) + 4096;
  EXPECT_TRUE(before->same_memory_at(*mapping_of(p), at));

  // The same file again, at the same place and offset: the same memory.
  ASSERT_EQ(mmap(p, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a, 0), p);
  EXPECT_TRUE(before->same_memory_at(*mapping_of(p), at));
  // The same file at another offset, then another file: not the same memory.
  ASSERT_EQ(mmap(p, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a, kBytes), p);
  EXPECT_FALSE(before->same_memory_at(*mapping_of(p), at));
  ASSERT_EQ(mmap(p, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, b, 0), p);
  EXPECT_FALSE(before->same_memory_at(*mapping_of(p), at));

  ASSERT_EQ(munmap(p, kBytes), 0);
  EXPECT_EQ(mapping_of(p).status().code(), StatusCode::kNotFound);
  close(a), close(b);
}

TEST(MemoryMapTest, HeapMemoryIsAnonymousAndPrivate) {
  std::vector<uint8_t> v(kBytes);
  auto m = mapping_of(v.data());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_FALSE(m->shared);
  EXPECT_FALSE(m->file_backed());
}

}  // namespace
}  // namespace chute
