#include "chute/order/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
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

// --- The shard-window order ---

// Shard layouts: empty, one shard, empty shards anywhere, uneven sizes, many tiny shards.
std::vector<std::vector<int64_t>> layouts() {
  std::vector<std::vector<int64_t>> out = {{}, {0}, {0, 0}, {5}, {1}, {3, 0, 7, 1, 0, 0, 12, 4}, {0, 9, 9, 0}, {100}};
  out.push_back(std::vector<int64_t>(23, 1));
  out.push_back(std::vector<int64_t>(17, 10));
  std::vector<int64_t> uneven;
  uint64_t x = 12345;
  for (int s = 0; s < 41; ++s) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    uneven.push_back(static_cast<int64_t>((x >> 33) % 30));  // 0..29, some empty
  }
  out.push_back(uneven);
  return out;
}

int64_t total(const std::vector<int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), int64_t{0}); }

// The shard (index-order number) of each source index, computed apart from the order.
std::vector<int64_t> shard_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < sizes.size(); ++s)
    out.insert(out.end(), static_cast<size_t>(sizes[s]), static_cast<int64_t>(s));
  return out;
}

TEST(ShardWindowOrderTest, EveryEpochIsAPermutationAndRanksSplitItAsSaid) {
  for (const auto& sizes : layouts()) {
    const int64_t n = total(sizes);
    for (int64_t k : {1, 2, 3, 8, 100}) {
      for (bool shuffle : {false, true}) {
        for (uint64_t epoch : {0, 1}) {
          const ShardWindows shards{sizes, k};
          const ShardWindowOrder global(sizes, k, shuffle, 7, epoch);
          ASSERT_EQ(global.size(), n);
          std::vector<int64_t> g(static_cast<size_t>(n));
          for (int64_t p = 0; p < n; ++p) g[p] = global(p);
          auto sorted = g;
          std::sort(sorted.begin(), sorted.end());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n=" << n << " k=" << k;
          if (!shuffle) EXPECT_EQ(sorted, g) << "without shuffle the order is sequential";
          for (int64_t world : {1, 2, 3, 5}) {
            for (bool even : {true, false}) {
              if (even && world > 1 && n < world) continue;  // check_shard refuses it
              int64_t next = 0;                              // ranks' blocks follow each other
              std::set<int64_t> seen;
              for (int64_t rank = 0; rank < world; ++rank) {
                const EpochOrder o(shards, shuffle, 7, epoch, {rank, world, even});
                EXPECT_EQ(o.size(), EpochOrder::rank_size(n, {rank, world, even}));
                if (even) EXPECT_EQ(o.size(), n / world);
                for (int64_t i = 0; i < o.size(); ++i) {
                  ASSERT_EQ(o[i], g[next + i]) << "rank " << rank << " takes a contiguous block";
                  ASSERT_TRUE(seen.insert(o[i]).second) << "duplicate " << o[i];
                }
                next += o.size();
              }
              EXPECT_EQ(next, even ? n - n % world : n) << "even_split leaves out only the remainder";
            }
          }
        }
      }
    }
  }
}

TEST(ShardWindowOrderTest, FixedBySeedAndEpochAndShufflesShardsAndSamples) {
  const std::vector<int64_t> sizes(50, 20);
  const ShardWindows shards{sizes, 4};
  const auto a = materialise(EpochOrder(shards, true, 3, 0));
  EXPECT_EQ(a, materialise(EpochOrder(shards, true, 3, 0)));
  EXPECT_NE(a, materialise(EpochOrder(shards, true, 3, 1)));
  EXPECT_NE(a, materialise(EpochOrder(shards, true, 4, 0)));
  EXPECT_NE(a, materialise(EpochOrder(ShardWindows{sizes, 5}, true, 3, 0)));
  // The shard sequence changes from epoch to epoch, and is not index order.
  // (shards in first-use order; sample i lies in shard i / 20)
  const auto first_use = [](const std::vector<int64_t>& order) {
    std::vector<int64_t> out;
    for (int64_t i : order)
      if (std::find(out.begin(), out.end(), i / 20) == out.end()) out.push_back(i / 20);
    return out;
  };
  const auto s0 = first_use(a), s1 = first_use(materialise(EpochOrder(shards, true, 3, 1)));
  EXPECT_NE(s0, s1);
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(s0, identity);
  // Within a window samples are shuffled: about half of the steps go up, as in a random permutation.
  int ascending = 0;
  for (size_t i = 1; i < a.size(); ++i) ascending += a[i] > a[i - 1];
  EXPECT_NEAR(ascending, 500, 80);
}

TEST(ShardWindowOrderTest, AWindowHoldsExactlyTheSamplesOfAtMostKShards) {
  for (const auto& sizes : layouts()) {
    const auto shard = shard_of(sizes);
    for (int64_t k : {1, 2, 3, 8}) {
      const ShardWindowOrder o(sizes, k, true, 11, 2);
      EXPECT_EQ(o.num_windows(), (static_cast<int64_t>(sizes.size()) + k - 1) / k);
      EXPECT_EQ(o.window_begin(o.num_windows()), o.size());
      for (int64_t w = 0; w < o.num_windows(); ++w) {
        std::set<int64_t> shards, samples;
        for (int64_t p = o.window_begin(w); p < o.window_begin(w + 1); ++p) {
          const int64_t i = o(p);
          shards.insert(shard[i]);
          samples.insert(i);
          ASSERT_EQ(o.shard_at(p), shard[i]);
        }
        EXPECT_LE(static_cast<int64_t>(shards.size()), k);
        int64_t whole = 0;  // the window holds its shards whole
        for (int64_t s : shards) whole += sizes[s];
        EXPECT_EQ(static_cast<int64_t>(samples.size()), whole);
      }
      // Any run of consecutive positions no longer than the smallest window touches at most 2K shards.
      int64_t shortest = o.size();
      for (int64_t w = 0; w < o.num_windows(); ++w)
        shortest = std::min(shortest, o.window_begin(w + 1) - o.window_begin(w));
      for (int64_t p = 0; shortest > 0 && p + shortest <= o.size(); ++p) {
        std::set<int64_t> touched;
        for (int64_t q = p; q < p + shortest; ++q) touched.insert(shard[o(q)]);
        ASSERT_LE(static_cast<int64_t>(touched.size()), 2 * k);
      }
    }
  }
}

TEST(ShardWindowOrderTest, LocalityAgainstTheSampleOrder) {
  // 64 shards of 100: a block of 800 consecutive positions (one window) reads 8 shards in the shard
  // order and nearly all 64 in the sample order.
  const std::vector<int64_t> sizes(64, 100);
  const auto shard = shard_of(sizes);
  const auto windows = materialise(EpochOrder(ShardWindows{sizes, 8}, true, 5, 0));
  const auto samples = materialise(EpochOrder(6400, true, 5, 0));
  for (int64_t b = 0; b < 8; ++b) {
    std::set<int64_t> in_windows, in_samples;
    for (int64_t p = b * 800; p < (b + 1) * 800; ++p)
      in_windows.insert(shard[windows[p]]), in_samples.insert(shard[samples[p]]);
    EXPECT_EQ(in_windows.size(), 8u);
    EXPECT_GT(in_samples.size(), 60u);
  }
}

TEST(ShardWindowOrderTest, ABillionSamplesCostNoTable) {
  // 4 shards of 250M samples: the order is per position, so building it and reading it allocate O(shards).
  const std::vector<int64_t> sizes(4, 250'000'000);
  const EpochOrder o(ShardWindows{sizes, 2}, true, 9, 3, {1, 3, true});
  EXPECT_EQ(o.size(), 333'333'333);
  std::set<int64_t> seen;
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{123'456'789}, o.size() - 1}) {
    const int64_t i = o[k];
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 1'000'000'000);
    seen.insert(i);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(ShardWindowOrderTest, CheckRefusesBadInput) {
  EXPECT_TRUE((ShardWindows{{1, 0, 2}, 1}.check().is_ok()));
  EXPECT_FALSE((ShardWindows{{1, 2}, 0}.check().is_ok()));
  const Status negative = ShardWindows{{1, -2}, 2}.check();
  ASSERT_FALSE(negative.is_ok());
  EXPECT_NE(negative.message().find("shard 1 has a negative size -2"), std::string::npos) << negative.message();
  EXPECT_FALSE((ShardWindows{{INT64_MAX, 1}, 2}.check().is_ok()));
}

TEST(ShardWindowOrderTest, SampleOrderNames) {
  EXPECT_EQ(*parse_sample_order("sample"), SampleOrder::kSample);
  EXPECT_EQ(*parse_sample_order("shards"), SampleOrder::kShards);
  EXPECT_STREQ(sample_order_name(SampleOrder::kShards), "shards");
  EXPECT_FALSE(parse_sample_order("shard").is_ok());
}

}  // namespace
}  // namespace chute
