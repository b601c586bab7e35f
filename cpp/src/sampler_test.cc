#include "chute/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace chute {
namespace {

std::vector<int64_t> materialise(const EpochOrder& o) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < o.size(); ++k) v.push_back(o[k]);
  return v;
}

TEST(EpochOrderTest, SequentialIsIdentity) {
  const auto v = materialise(EpochOrder(5, false, 1, 2));
  EXPECT_EQ(v, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(EpochOrderTest, ShuffleIsAPermutationFixedBySeedAndEpoch) {
  const auto a = materialise(EpochOrder(1000, true, 3, 0));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, materialise(EpochOrder(1000, true, 3, 0)));
  EXPECT_NE(a, materialise(EpochOrder(1000, true, 3, 1)));
  EXPECT_NE(a, materialise(EpochOrder(1000, true, 4, 0)));
}

TEST(EpochOrderTest, EmptyAndSingle) {
  EXPECT_EQ(EpochOrder(0, true, 0, 0).size(), 0);
  EXPECT_EQ(materialise(EpochOrder(1, true, 0, 0)), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace chute
