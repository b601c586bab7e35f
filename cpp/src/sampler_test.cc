#include "chute/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace chute {
namespace {

std::vector<int64_t> materialise(const EpochOrder& o) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < o.size(); ++k) v.push_back(o[k]);
  return v;
}

TEST(EpochOrderTest, SequentialIsIdentity) {
  EXPECT_EQ(materialise(EpochOrder(5, false, 1, 2)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(EpochOrderTest, ShuffleIsAPermutationForEverySize) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 63, 64, 65, 1000, 4097}) {
    const auto a = materialise(EpochOrder(n, true, 3, 0));
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n=" << n;
  }
}

TEST(EpochOrderTest, ShuffleIsFixedBySeedAndEpochAndLooksRandom) {
  const auto a = materialise(EpochOrder(1000, true, 3, 0));
  EXPECT_EQ(a, materialise(EpochOrder(1000, true, 3, 0)));
  EXPECT_NE(a, materialise(EpochOrder(1000, true, 3, 1)));
  EXPECT_NE(a, materialise(EpochOrder(1000, true, 4, 0)));
  int fixed = 0, ascending = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    fixed += a[i] == i;
    if (i > 0) ascending += a[i] > a[i - 1];
  }
  EXPECT_LT(fixed, 10);             // a random permutation has about one fixed point
  EXPECT_NEAR(ascending, 500, 60);  // and about half its steps go up
}

TEST(EpochOrderTest, RanksAreDisjointEqualAndCoverAllButTheRemainder) {
  for (int64_t n : {10, 11, 12, 13, 1001}) {
    for (int64_t world : {1, 2, 3, 4}) {
      for (bool shuffle : {false, true}) {
        std::set<int64_t> seen;
        for (int64_t rank = 0; rank < world; ++rank) {
          const EpochOrder o(n, shuffle, 9, 2, {rank, world, true});
          EXPECT_EQ(o.size(), n / world);
          for (int64_t v : materialise(o)) ASSERT_TRUE(seen.insert(v).second) << "duplicate " << v;
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), n - n % world);
      }
    }
  }
}

TEST(EpochOrderTest, ExactModeVisitsEverySampleOnce) {
  for (int64_t n : {1, 2, 10, 11, 13}) {
    for (int64_t world : {1, 2, 3, 4, 16}) {
      std::set<int64_t> seen;
      int64_t total = 0;
      for (int64_t rank = 0; rank < world; ++rank) {
        const EpochOrder o(n, true, 1, 0, {rank, world, false});
        EXPECT_LE(o.size(), (n + world - 1) / world);
        EXPECT_GE(o.size(), n / world);
        total += o.size();
        for (int64_t v : materialise(o)) ASSERT_TRUE(seen.insert(v).second);
      }
      EXPECT_EQ(total, n);
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    }
  }
}

TEST(EpochOrderTest, EmptyDataset) {
  EXPECT_EQ(EpochOrder(0, true, 0, 0).size(), 0);
  EXPECT_EQ(EpochOrder(0, false, 0, 0, {1, 2, false}).size(), 0);
}

TEST(EpochOrderTest, ExplicitOrderIsTheGivenIndices) {
  const EpochOrder order(std::vector<int64_t>{4, 4, 0, 9});
  EXPECT_EQ(order.size(), 4);
  EXPECT_EQ(order[0], 4);
  EXPECT_EQ(order[1], 4);
  EXPECT_EQ(order[2], 0);
  EXPECT_EQ(order[3], 9);
  EXPECT_EQ(EpochOrder(std::vector<int64_t>{}).size(), 0);
}

TEST(EpochOrderTest, CheckShardRefusesASplitThatLeavesEveryRankEmpty) {
  EXPECT_TRUE(EpochOrder::check_shard(8, {0, 8, true}).is_ok());
  Status empty = EpochOrder::check_shard(8, {3, 100, true});  // 8 // 100 = 0 samples on every rank
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.message().find("world_size 100 is larger than the dataset (8 samples)"), std::string::npos)
      << empty.message();
  EXPECT_TRUE(EpochOrder::check_shard(8, {3, 100, false}).is_ok());  // exact evaluation: ranks get 0 or 1
  EXPECT_TRUE(EpochOrder::check_shard(0, {0, 1, true}).is_ok());     // one process: an empty dataset is empty
  EXPECT_FALSE(EpochOrder::check_shard(8, {2, 2, true}).is_ok());
  EXPECT_FALSE(EpochOrder::check_shard(8, {-1, 2, false}).is_ok());
  EXPECT_FALSE(EpochOrder::check_shard(8, {0, 0, false}).is_ok());
}

}  // namespace
}  // namespace chute
