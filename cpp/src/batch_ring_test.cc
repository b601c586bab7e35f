#include "chute/batch_ring.h"

#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace
}  // namespace chute
