#include "chute/base/buffer_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>

namespace chute {
namespace {

TEST(PageBufferTest, IsWholePagesAlignedAndWritable) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto b = PageBuffer::allocate(page + 1);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->capacity(), 2 * page);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % page, 0u);
  std::memset(b->data(), 7, b->capacity());
  PageBuffer moved = std::move(b).value();
  EXPECT_EQ(moved.data()[2 * page - 1], 7);
  EXPECT_EQ(PageBuffer::allocate(0)->capacity(), page);
}

TEST(BufferPoolTest, ReusesItsBuffersAndStopsAtTheLimit) {
  std::atomic<int> returned{0};
  auto pool = BufferPool::create(10000, 2, [&] { ++returned; });
  auto a = pool->try_take();
  auto b = pool->try_take();
  ASSERT_TRUE(a.is_ok() && *a && b.is_ok() && *b);
  EXPECT_GE((*a)->capacity(), 10000u);
  auto none = pool->try_take();
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(*none, nullptr);  // two out: the limit
  const uint8_t* memory = (*a)->data();
  a->reset();
  EXPECT_EQ(returned.load(), 1);
  EXPECT_EQ(pool->out(), 1);
  EXPECT_EQ(pool->allocated(), 2);
  auto again = pool->try_take();
  ASSERT_TRUE(again.is_ok() && *again);
  EXPECT_EQ((*again)->data(), memory);  // the same memory, not a new mapping
}

TEST(BufferPoolTest, ALoweredLimitShrinksThePoolAsBuffersComeBack) {
  auto pool = BufferPool::create(4096, 3);
  std::vector<std::shared_ptr<PageBuffer>> out;
  for (int i = 0; i < 3; ++i) out.push_back(*pool->try_take());
  pool->set_limit(1);
  EXPECT_EQ(*pool->try_take(), nullptr);
  out.pop_back();
  out.pop_back();
  EXPECT_EQ(pool->allocated(), 1);  // the two given back beyond the new limit were unmapped
  out.clear();
  EXPECT_EQ(pool->allocated(), 1);  // the last one is kept for reuse
  EXPECT_NE(*pool->try_take(), nullptr);
}

TEST(BufferPoolTest, ABufferOutlivesItsPoolHandle) {
  auto pool = BufferPool::create(4096, 1);
  auto b = *pool->try_take();
  pool.reset();  // the buffer keeps the pool alive until it is back
  b->data()[0] = 1;
  b.reset();
}

}  // namespace
}  // namespace chute
