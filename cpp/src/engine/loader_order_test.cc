// The Loader's order option: the shard-window order (sampler.h) over a source's shards.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "chute/engine/loader.h"
#include "chute/order/sampler.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::MemorySource;

// A MemorySource told to be stored as shards of the given sizes; label == source index.
class ShardedSource final : public Source {
 public:
  ShardedSource(int n, std::vector<int64_t> sizes) : memory_(images(n), 1 << 30), sizes_(std::move(sizes)) {}
  int64_t size() const override { return memory_.size(); }
  int64_t label(int64_t i) const override { return memory_.label(i); }
  std::string name(int64_t i) const override { return memory_.name(i); }
  Status read(int64_t i, std::vector<uint8_t>& out) const override { return memory_.read(i, out); }
  std::vector<int64_t> shard_sizes() const override { return sizes_; }

 private:
  static std::vector<std::vector<uint8_t>> images(int n) {
    std::vector<std::vector<uint8_t>> out;
    for (int i = 0; i < n; ++i) out.push_back(testing::encode_jpeg(testing::synthetic_rgb(8, 8, i), 8, 8));
    return out;
  }
  MemorySource memory_;
  std::vector<int64_t> sizes_;
};

std::unique_ptr<Loader> make(std::shared_ptr<const Source> source, LoaderOptions options) {
  auto pipeline = Pipeline::create({CenterCrop{8, 8}});
  auto loader = Loader::create(std::move(source), std::move(*pipeline), options);
  EXPECT_TRUE(loader.is_ok()) << loader.status().to_string();
  return loader.is_ok() ? std::move(*loader) : nullptr;
}

// The labels of an epoch from position `start` on.
std::vector<int64_t> labels(Loader& loader, uint64_t epoch, int64_t start = 0) {
  std::vector<int64_t> out;
  EXPECT_TRUE(loader.start_epoch(epoch, start).is_ok());
  for (;;) {
    auto batch = loader.next();
    EXPECT_TRUE(batch.is_ok()) << batch.status().to_string();
    if (!batch.is_ok() || !*batch) return out;
    for (int64_t i = 0; i < (*batch)->size(); ++i) out.push_back((*batch)->labels()[i]);
  }
}

TEST(LoaderOrderTest, ShardOrderIsTheShardWindowOrderPerRankAndResumesExactly) {
  const std::vector<int64_t> sizes = {5, 0, 9, 3, 7, 7, 1, 8};
  auto source = std::make_shared<ShardedSource>(40, sizes);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 2; ++rank) {
    const LoaderOptions options{.batch_size = 3,
                                .shuffle = true,
                                .seed = 4,
                                .num_threads = 2,
                                .shard = {rank, 2, false},
                                .order = SampleOrder::kShards,
                                .shard_window = 3};
    auto loader = make(source, options);
    ASSERT_NE(loader, nullptr);
    const EpochOrder expected(ShardWindows{sizes, 3}, true, 4, 1, options.shard);
    const auto got = labels(*loader, 1);
    ASSERT_EQ(static_cast<int64_t>(got.size()), expected.size());
    for (int64_t k = 0; k < expected.size(); ++k) EXPECT_EQ(got[k], expected[k]) << "position " << k;
    for (int64_t l : got) EXPECT_TRUE(seen.insert(l).second);
    const auto tail = labels(*loader, 1, 7);  // a resume at position 7 continues the same order
    EXPECT_EQ(tail, std::vector<int64_t>(got.begin() + 7, got.end()));
  }
  EXPECT_EQ(seen.size(), 40u);
}

TEST(LoaderOrderTest, LoaderOrderIsWhatTheLoaderVisitsInEitherOrder) {
  // chute.ray.RemoteLoader's driver hands out batches from LoaderOrder: it must be the Loader's own order.
  auto source = std::make_shared<ShardedSource>(23, std::vector<int64_t>{4, 6, 5, 8});
  for (SampleOrder kind : {SampleOrder::kSample, SampleOrder::kShards}) {
    const LoaderOptions options{.batch_size = 4,
                                .shuffle = true,
                                .seed = 9,
                                .num_threads = 2,
                                .shard = {1, 3, true},
                                .order = kind,
                                .shard_window = 2};
    auto loader = make(source, options);
    ASSERT_NE(loader, nullptr);
    auto order = LoaderOrder::create(*source, options);
    ASSERT_TRUE(order.is_ok()) << order.status().to_string();
    for (uint64_t epoch : {0, 3}) {
      const auto expected = order->epoch(epoch);
      const auto got = labels(*loader, epoch);
      ASSERT_EQ(static_cast<int64_t>(got.size()), expected->size());
      for (int64_t k = 0; k < expected->size(); ++k) EXPECT_EQ(got[k], (*expected)[k]) << sample_order_name(kind);
    }
  }
  // The shard is checked against the source, as Loader::create checks it.
  EXPECT_FALSE(LoaderOrder::create(*source, {.shard = {0, 24, true}}).is_ok());
}

TEST(LoaderOrderTest, ShardOrderNeedsASourceStoredInShards) {
  auto pipeline = Pipeline::create({CenterCrop{8, 8}});
  auto plain = std::make_shared<MemorySource>(std::vector<std::vector<uint8_t>>(4));
  auto refused = Loader::create(plain, *pipeline, {.order = SampleOrder::kShards});
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("this MemorySource is not stored in shards"), std::string::npos)
      << refused.status().message();
  // Shards that do not add up to the source: a bug in that source, named.
  auto wrong = Loader::create(std::make_shared<ShardedSource>(4, std::vector<int64_t>{1, 2}), *pipeline,
                              {.order = SampleOrder::kShards});
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("the ShardedSource's shards hold 3 samples, the source 4"), std::string::npos)
      << wrong.status().message();
}

}  // namespace
}  // namespace chute
