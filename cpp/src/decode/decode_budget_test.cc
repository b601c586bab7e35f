#include "chute/decode/decode_budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "chute/engine/processor.h"

namespace chute {
namespace {

// Polls `cond` for up to a minute: a bound that fails the test instead of hanging it, never a timing claim.
template <typename F>
bool eventually(F&& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(DecodeBudgetTest, AdmitsWhatFitsAndAnythingAlone) {
  DecodeBudget budget(100);
  {
    auto a = budget.acquire(60);
    auto b = budget.acquire(40);
    EXPECT_EQ(budget.in_use(), 100u);
  }
  EXPECT_EQ(budget.in_use(), 0u);
  auto huge = budget.acquire(1000);  // larger than the whole budget: admitted, alone
  EXPECT_EQ(huge.bytes(), 1000u);
  huge.release();
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_EQ(budget.waits(), 0);
}

TEST(DecodeBudgetTest, ADecodeThatDoesNotFitWaitsForTheOneInFlight) {
  DecodeBudget budget(100);
  auto first = budget.acquire(70);
  std::atomic<bool> admitted{false};
  std::thread second([&] {
    auto lease = budget.acquire(70);
    admitted = true;
  });
  ASSERT_TRUE(eventually([&] { return budget.waits() == 1; }));  // it is waiting, not admitted
  EXPECT_FALSE(admitted.load());
  EXPECT_EQ(budget.in_use(), 70u);
  first.release();
  second.join();
  EXPECT_TRUE(admitted.load());
  EXPECT_EQ(budget.peak_in_use(), 70u);  // never both at once
}

TEST(DecodeBudgetTest, BatchBuffersLeaveLessRoom) {
  DecodeBudget budget(100);
  budget.set_reserved(50);
  auto first = budget.acquire(40);
  std::thread second([&] { auto lease = budget.acquire(40); });
  ASSERT_TRUE(eventually([&] { return budget.waits() == 1; }));
  budget.set_reserved(0);  // the buffers went: both fit now
  second.join();
  EXPECT_EQ(budget.in_use(), 40u);
}

TEST(DecodeBudgetTest, ScratchEstimateCountsWholePngRowsAndProgressiveCoefficients) {
  const ImageInfo png{14000, 14000, 3, false};
  // A PNG decodes whole rows: 14000 x 3 bytes per row of the window, whatever the window's width.
  EXPECT_GE(decode_scratch_bytes(png, true, 190000, 100, 14000, false, 224), size_t{14000} * 14000 * 3);
  const ImageInfo jpeg{4000, 3000, 3, false}, progressive{4000, 3000, 3, true};
  const size_t crop = decode_scratch_bytes(jpeg, false, 1 << 20, 400, 300, false, 224);
  EXPECT_LT(crop, kUnchargedDecodeBytes);
  EXPECT_GE(decode_scratch_bytes(progressive, false, 1 << 20, 400, 300, false, 224), size_t{4000} * 3000 * 3 * 2);
}

}  // namespace
}  // namespace chute
