#include "chute/engine/batch_ring.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace chute {
namespace {

// A closed loader used to keep every batch buffer until the loader object itself was freed, which in
// Python may be much later than close() or the end of a `with` block (test_shutdown.py's SIGINT case).
TEST(BatchRingTest, CloseFreesFreeSlotsNowAndHeldOnesWhenReleased) {
  BatchRing ring(/*batch_size=*/4, /*sample_bytes=*/1000, /*initial_slots=*/3, /*max_bytes=*/1 << 20);
  const int held = ring.acquire();
  ASSERT_GE(held, 0);
  std::memset(ring.images(held), 7, 4000);
  ring.close();
  EXPECT_FALSE(ring.can_acquire());
  EXPECT_EQ(ring.acquire(), -1);
  for (int slot = 0; slot < ring.num_slots(); ++slot) {
    if (slot == held) {
      EXPECT_EQ(ring.images(slot)[3999], 7);  // a held buffer stays valid
    } else {
      EXPECT_EQ(ring.images(slot), nullptr);
      EXPECT_EQ(ring.labels(slot), nullptr);
    }
  }
  ring.release(held);
  EXPECT_EQ(ring.images(held), nullptr);
}

TEST(BatchRingTest, SizesThatOverflowAreErrors) {
  EXPECT_TRUE(BatchRing::check_size(256, 3 * 224 * 224, 8).is_ok());
  // batch_size x (sample + label bytes) wraps around 2**64.
  Status batch = BatchRing::check_size(int64_t{1} << 62, 192, 3);
  ASSERT_FALSE(batch.is_ok());
  EXPECT_NE(batch.message().find("lower batch_size"), std::string::npos) << batch.message();
  // Each slot fits, the ring does not; and a slot count past INT_MAX.
  EXPECT_FALSE(BatchRing::check_size(1, (size_t{1} << 62), 8).is_ok());
  Status slots = BatchRing::check_size(1, 192, int64_t{1} << 31);
  ASSERT_FALSE(slots.is_ok());
  EXPECT_NE(slots.message().find("lower prefetch"), std::string::npos) << slots.message();
  EXPECT_FALSE(BatchRing::check_size(1, SIZE_MAX - 4, 1).is_ok());  // sample + label bytes wrap
}

// A consumer that kept many batches made the ring grow; once it lets go, trim() gives the memory back.
TEST(BatchRingTest, TrimFreesFreeSlotsBeyondKeepAndTheyComeBackOnDemand) {
  // A slot: 200 image bytes (labels 64-byte aligned, at 256) + 2 labels = 272 bytes; the budget holds 6.
  BatchRing ring(/*batch_size=*/2, /*sample_bytes=*/100, /*initial_slots=*/2, /*max_bytes=*/6 * 272);
  ASSERT_EQ(ring.slot_bytes(), 272u);
  std::vector<int> held;
  for (int i = 0; i < 6; ++i) held.push_back(ring.acquire());
  EXPECT_EQ(ring.slots_with_memory(), 6);
  EXPECT_EQ(ring.acquire(), -1);  // the budget is spent
  ring.trim(2);
  EXPECT_TRUE(ring.take_retired().empty());  // all held: nothing to free
  EXPECT_EQ(ring.slots_with_memory(), 6);
  for (int i = 0; i < 5; ++i) ring.release(held[i]);
  ring.trim(2);
  EXPECT_EQ(ring.take_retired().size(), 4u);  // for the owner to free after its lock
  EXPECT_EQ(ring.slots_with_memory(), 2);     // the held one and one free
  EXPECT_EQ(ring.num_free(), 5);              // 4 of them without memory until acquired
  std::memset(ring.images(held[5]), 9, 200);  // the held buffer is untouched
  std::vector<int> again;
  for (int i = 0; i < 5; ++i) {
    again.push_back(ring.acquire());
    ASSERT_GE(again.back(), 0);
    ASSERT_NE(again.back(), held[5]);
    std::memset(ring.images(again.back()), i, 200);  // each has its memory again
  }
  EXPECT_EQ(ring.slots_with_memory(), 6);
  EXPECT_EQ(ring.acquire(), -1);
  EXPECT_EQ(ring.images(held[5])[199], 9);
  for (int slot : again) ring.release(slot);
  ring.release(held[5]);
  EXPECT_EQ(ring.num_free(), 6);
}

// With a BlockPool (pin_memory's torch blocks), a delivered slot's memory leaves the ring with its batch:
// the slot is filled again only in a newly lent block, never in the one the consumer may still copy from.
TEST(BatchRingTest, HandedOverMemoryIsNeverReused) {
  auto pool = std::make_shared<BlockPool>();
  BatchRing ring(/*batch_size=*/2, /*sample_bytes=*/100, /*initial_slots=*/2, /*max_bytes=*/0, pool);
  EXPECT_EQ(ring.acquire(), -1);  // nothing lent yet
  EXPECT_EQ(ring.memory_wanted(), 2);
  std::vector<std::vector<uint8_t>> blocks(3, std::vector<uint8_t>(ring.slot_bytes()));
  pool->donate(blocks[0].data(), blocks[0].size());
  pool->donate(blocks[1].data(), blocks[1].size());
  const int a = ring.acquire();
  ASSERT_GE(a, 0);
  uint8_t* given = ring.images(a);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(ring.labels(a)), given + ring.labels_offset());
  ring.release(a, /*handed_over=*/true);
  EXPECT_EQ(pool->handed_over_count(), 1);
  const int b = ring.acquire();  // the other slot, or the released one with the second block
  ASSERT_GE(b, 0);
  EXPECT_NE(ring.images(b), given);
  EXPECT_EQ(ring.acquire(), -1);  // a free slot, but no block for it
  EXPECT_FALSE(ring.can_acquire());
  EXPECT_EQ(ring.memory_wanted(), 1);
  pool->donate(blocks[2].data(), blocks[2].size());
  const int c = ring.acquire();
  ASSERT_GE(c, 0);
  EXPECT_EQ(ring.images(c), blocks[2].data());
  ring.release(b);  // not handed over: its block stays in the ring
  ring.release(c);
  ring.close();  // blocks still in the ring go back to the lender, unused (once the owner drops them)
  ring.take_retired();
  std::vector<void*> returned = pool->take_returned();
  EXPECT_EQ(returned.size(), 2u);
  for (void* p : returned) EXPECT_NE(p, given);
}

// torch's pinned blocks are rounded up to a power of two: the byte budget counts the blocks, not the batches.
TEST(BatchRingTest, TheBudgetCountsRoundedBlocks) {
  auto plain = std::make_shared<BlockPool>();
  auto rounded = std::make_shared<BlockPool>("torch pinned", /*power_of_two_blocks=*/true);
  // A slot of 1216 (2 x 600, aligned) + 16 bytes of labels: a 2048-byte block.
  BatchRing a(/*batch_size=*/2, /*sample_bytes=*/600, /*initial_slots=*/1, /*max_bytes=*/8192, plain);
  BatchRing b(/*batch_size=*/2, /*sample_bytes=*/600, /*initial_slots=*/1, /*max_bytes=*/8192, rounded);
  ASSERT_EQ(a.slot_bytes(), 1232u);
  EXPECT_EQ(a.slot_footprint(), 1232u);
  EXPECT_EQ(b.slot_footprint(), 2048u);
  EXPECT_EQ(a.max_slots(), 6);
  EXPECT_EQ(b.max_slots(), 4);
  EXPECT_EQ(rounded->footprint(4096), 4096u);  // a power of two already
}

}  // namespace

#ifdef MADV_WIPEONFORK
// A fork must not share the batch buffers copy-on-write (the parent's next writes would each fault and copy
// a page): the child sees zeros, and the parent's data stays its own.
TEST(HostAllocatorTest, HeapBuffersAreNotSharedWithAForkedChild) {
  const std::shared_ptr<HostAllocator> heap = heap_allocator();
  const size_t bytes = 3 * 4096 + 100;
  auto* p = static_cast<uint8_t*>(heap->allocate(bytes));
  ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  std::memset(p, 0xAB, bytes);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (size_t i = 0; i < bytes; ++i)
      if (p[i] != 0) _exit(1);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child saw the parent's bytes";
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0xAB) << i;
  heap->deallocate(p, bytes);
}
#endif

}  // namespace chute
