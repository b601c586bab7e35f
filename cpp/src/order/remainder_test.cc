#include "chute/order/remainder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "chute/order/sampler.h"

namespace chute {
namespace {

// The plain definition (remainder.h): the list of positions left, place by place.
std::vector<int64_t> reference(int64_t n, bool contiguous, bool even_split, const std::vector<EpochSplit>& splits) {
  std::vector<int64_t> list(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) list[i] = i;
  for (const EpochSplit& split : splits) {
    const int64_t size = static_cast<int64_t>(list.size()), world = split.world_size;
    std::vector<bool> keep(list.size(), false);
    for (int64_t r = 0; r < world; ++r) {
      const Shard shard{r, world, even_split};
      const int64_t share = EpochOrder::rank_size(size, shard), first = EpochOrder::rank_first(size, shard);
      for (int64_t k = split.received[r]; k < share; ++k) keep[contiguous ? first + k : k * world + r] = true;
    }
    std::vector<int64_t> next;
    for (size_t i = 0; i < list.size(); ++i)
      if (keep[i]) next.push_back(list[i]);
    list = std::move(next);
  }
  return list;
}

std::vector<int64_t> positions(const EpochRemainder& rest) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < rest.size(); ++i) v.push_back(rest(i));
  return v;
}

std::vector<int64_t> materialise(const EpochOrder& o) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < o.size(); ++k) v.push_back(o[k]);
  return v;
}

// A split of a list of `size` places over `world` ranks with random received counts (some none, some all).
EpochSplit random_split(std::mt19937_64& rng, int64_t size, int64_t world, bool even_split) {
  EpochSplit split{world, {}};
  for (int64_t r = 0; r < world; ++r) {
    const int64_t share = EpochOrder::rank_size(size, {r, world, even_split});
    split.received.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(share + 1)));
  }
  return split;
}

TEST(EpochRemainderTest, NoSplitLeavesTheWholeEpochAndTheSameOrder) {
  for (bool contiguous : {false, true}) {
    auto rest = EpochRemainder::create(23, contiguous, true, {});
    ASSERT_TRUE(rest.is_ok());
    EXPECT_EQ(positions(**rest), reference(23, contiguous, true, {}));
  }
  auto rest = *EpochRemainder::create(23, false, true, {});
  for (int64_t rank = 0; rank < 3; ++rank) {
    const Shard shard{rank, 3, true};
    EXPECT_EQ(materialise(EpochOrder(23, true, 5, 2, shard, rest)), materialise(EpochOrder(23, true, 5, 2, shard)));
  }
  const ShardWindows windows{{4, 0, 7, 3, 9}, 2};
  auto shard_rest = *EpochRemainder::create(23, true, false, {});
  for (int64_t rank = 0; rank < 3; ++rank) {
    const Shard shard{rank, 3, false};
    EXPECT_EQ(materialise(EpochOrder(windows, true, 5, 2, shard, shard_rest)),
              materialise(EpochOrder(windows, true, 5, 2, shard)));
  }
}

TEST(EpochRemainderTest, MatchesThePlainDefinitionOverRandomSplits) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = static_cast<int64_t>(rng() % 60);
    const bool contiguous = rng() % 2, even_split = rng() % 2;
    std::vector<EpochSplit> splits;
    int64_t size = n;
    const int restarts = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < restarts; ++s) {
      const int64_t world = 1 + static_cast<int64_t>(rng() % 5);
      splits.push_back(random_split(rng, size, world, even_split));
      size = static_cast<int64_t>(reference(n, contiguous, even_split, splits).size());
    }
    auto rest = EpochRemainder::create(n, contiguous, even_split, splits);
    ASSERT_TRUE(rest.is_ok()) << rest.status().message();
    ASSERT_EQ(positions(**rest), reference(n, contiguous, even_split, splits)) << "trial " << trial;
  }
}

TEST(EpochRemainderTest, NewRanksDeliverEverySampleLeftExactlyOnce) {
  // 2 -> 3, 4 -> 2, 3 -> 1 ranks, both orders: what the old ranks received plus what the new ranks visit is
  // every sample of the epoch once (even_split=False); under even_split the new world leaves out fewer
  // than its world size, all its ranks equal.
  const ShardWindows windows{{9, 4, 0, 13, 7, 11, 2, 6}, 3};  // 52 samples
  const int64_t n = 52;
  std::mt19937_64 rng(11);
  for (auto [old_world, new_world] : {std::pair{2, 3}, {4, 2}, {3, 1}, {3, 3}}) {
    for (bool shards : {false, true}) {
      for (bool even_split : {false, true}) {
        for (int trial = 0; trial < 20; ++trial) {
          auto global = [&](Shard shard, std::shared_ptr<const EpochRemainder> rest = nullptr) {
            return shards ? EpochOrder(windows, true, 3, 1, shard, rest) : EpochOrder(n, true, 3, 1, shard, rest);
          };
          const EpochSplit split = random_split(rng, n, old_world, even_split);
          std::multiset<int64_t> seen;
          int64_t old_visits = 0;
          for (int64_t r = 0; r < old_world; ++r) {
            const EpochOrder old = global({r, old_world, even_split});
            old_visits += old.size();
            for (int64_t k = 0; k < split.received[r]; ++k) seen.insert(old[k]);
          }
          const int64_t received = static_cast<int64_t>(seen.size());
          auto rest = *EpochRemainder::create(n, shards, even_split, {split});
          ASSERT_EQ(rest->size(), old_visits - received);
          std::set<int64_t> sizes;
          for (int64_t r = 0; r < new_world; ++r) {
            const EpochOrder now = global({r, new_world, even_split}, rest);
            sizes.insert(now.size());
            for (int64_t v : materialise(now)) seen.insert(v);
          }
          std::set<int64_t> once(seen.begin(), seen.end());
          ASSERT_EQ(once.size(), seen.size()) << "a sample delivered twice";
          if (even_split) {
            EXPECT_EQ(sizes.size(), 1u);  // equal shares: equal steps
            EXPECT_EQ(static_cast<int64_t>(seen.size()), old_visits - rest->size() % new_world);
          } else {
            EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
            EXPECT_LE(*sizes.rbegin() - *sizes.begin(), 1);
          }
        }
      }
    }
  }
}

TEST(EpochRemainderTest, TheSameWorldAtEqualCountsContinuesEachRanksOwnOrder) {
  for (bool shards : {false, true}) {
    const ShardWindows windows{{5, 8, 3, 10, 4}, 2};
    auto order = [&](Shard shard, std::shared_ptr<const EpochRemainder> rest = nullptr) {
      return shards ? EpochOrder(windows, true, 1, 4, shard, rest) : EpochOrder(30, true, 1, 4, shard, rest);
    };
    auto rest = *EpochRemainder::create(30, shards, true, {{3, {4, 4, 4}}});
    for (int64_t r = 0; r < 3; ++r) {
      const auto own = materialise(order({r, 3, true}));
      EXPECT_EQ(materialise(order({r, 3, true}, rest)), std::vector<int64_t>(own.begin() + 4, own.end()));
    }
  }
}

TEST(EpochRemainderTest, RanksInStepCostAFewRunsWhateverTheEpoch) {
  const int64_t n = 1'000'000'000;
  auto interleaved = *EpochRemainder::create(n, false, true, {{8, std::vector<int64_t>(8, 123'456)}});
  EXPECT_EQ(interleaved->runs(), 1);
  EXPECT_EQ(interleaved->size(), n - 8 * 123'456);
  EXPECT_EQ((*interleaved)(0), 8 * 123'456);
  auto blocks = *EpochRemainder::create(n, true, true, {{8, std::vector<int64_t>(8, 123'456)}});
  EXPECT_EQ(blocks->runs(), 8);
  // A second restart, ranks again in step: still a handful of runs.
  auto again = *EpochRemainder::create(n, false, true,
                                       {{8, std::vector<int64_t>(8, 123'456)}, {3, std::vector<int64_t>(3, 1000)}});
  EXPECT_LE(again->runs(), 2);
  const EpochOrder rank(n, true, 0, 0, {1, 5, true}, again);
  EXPECT_EQ(rank.size(), again->size() / 5);
}

TEST(EpochRemainderTest, RefusesSplitsThatCannotBe) {
  auto message = [](std::vector<EpochSplit> splits) {
    auto rest = EpochRemainder::create(10, false, true, splits);
    EXPECT_FALSE(rest.is_ok());
    return rest.is_ok() ? std::string() : rest.status().message();
  };
  EXPECT_NE(message({{0, {}}}).find("world_size must be >= 1"), std::string::npos);
  EXPECT_NE(message({{2, {1}}}).find("1 received counts, one per rank"), std::string::npos);
  EXPECT_NE(message({{2, {1, 6}}})
                .find("split 0 (world_size 2): rank 1 received 6 samples, its share of the 10 "
                      "left is 5"),
            std::string::npos);
  EXPECT_NE(message({{2, {5, -1}}}).find("rank 1 received -1"), std::string::npos);
  EXPECT_NE(message({{2, {1, 1}}, {3, {0, 3, 0}}}).find("split 1 (world_size 3): rank 1 received 3"),
            std::string::npos);
}

}  // namespace
}  // namespace chute
