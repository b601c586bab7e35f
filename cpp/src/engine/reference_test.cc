#include "chute/engine/reference.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "chute/order/sampler.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::FailingSource;
using testing::MemorySource;

// Records, per read, the index and the reading thread's name.
class RecordingSource final : public Source {
 public:
  explicit RecordingSource(std::shared_ptr<const Source> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t label(int64_t i) const override { return inner_->label(i); }
  std::string name(int64_t i) const override { return inner_->name(i); }
  Status read(int64_t i, std::vector<uint8_t>& out) const override {
    char thread[16] = {};
    pthread_getname_np(pthread_self(), thread, sizeof thread);
    {
      std::lock_guard<std::mutex> lock(mu_);
      order_.push_back(i);
      threads_.insert(thread);
    }
    return inner_->read(i, out);
  }
  std::vector<int64_t> order() const {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }
  std::set<std::string> threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }

 private:
  std::shared_ptr<const Source> inner_;
  mutable std::mutex mu_;
  mutable std::vector<int64_t> order_;
  mutable std::set<std::string> threads_;
};

std::shared_ptr<MemorySource> samples(int n) {
  std::vector<std::vector<uint8_t>> items;
  for (int i = 0; i < n; ++i) items.emplace_back(static_cast<size_t>(10 + i), static_cast<uint8_t>(i));
  return std::make_shared<MemorySource>(std::move(items));
}

TEST(ReadRateTest, ReadsEverySampleOnceOnNamedThreads) {
  for (bool shuffle : {false, true}) {
    RecordingSource source(samples(100));
    auto r = read_rate(source, 3, shuffle);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->bytes, 100 * 10 + 99 * 100 / 2);
    EXPECT_EQ(r->failures, 0);
    EXPECT_GE(r->seconds, 0);
    std::vector<int64_t> order = source.order();
    std::multiset<int64_t> seen(order.begin(), order.end());
    ASSERT_EQ(seen.size(), 100u);
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
    EXPECT_EQ(source.threads(), std::set<std::string>{"chute-read"});
  }
}

TEST(ReadRateTest, ShuffledIsTheSampleOrderOfASingleThread) {
  RecordingSource source(samples(50));
  ASSERT_TRUE(read_rate(source, 1, true).is_ok());
  const EpochOrder epoch(50, true, 0, 0);
  std::vector<int64_t> want;
  for (int64_t k = 0; k < epoch.size(); ++k) want.push_back(epoch[k]);
  EXPECT_EQ(source.order(), want);
  std::vector<int64_t> sequential(50);
  for (int64_t i = 0; i < 50; ++i) sequential[static_cast<size_t>(i)] = i;
  EXPECT_NE(source.order(), sequential);
}

TEST(ReadRateTest, FailedReadsAreCountedNotErrors) {
  FailingSource source(samples(20), {3, 7, 11});
  auto r = read_rate(source, 2, false);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->failures, 3);
  EXPECT_EQ(source.reads(), 20);
}

TEST(ReadRateTest, AnEmptySourceReadsNothing) {
  auto r = read_rate(*samples(0), 2, true);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->bytes, 0);
  EXPECT_EQ(r->failures, 0);
}

}  // namespace
}  // namespace chute
