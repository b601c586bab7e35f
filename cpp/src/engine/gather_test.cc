#include "chute/engine/gather.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace chute {
namespace {

// A dataset of `rows` rows per column; each byte says which row and column it came from.
struct Columns {
  std::vector<std::vector<uint8_t>> data;
  std::vector<GatherColumn> columns;
  Columns(int64_t rows, std::vector<int64_t> row_bytes) {
    for (size_t c = 0; c < row_bytes.size(); ++c) {
      auto& d = data.emplace_back(static_cast<size_t>(rows * row_bytes[c]));
      for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i / row_bytes[c] * 7 + i % 13 + c);
    }
    for (size_t c = 0; c < row_bytes.size(); ++c) columns.push_back({data[c].data(), row_bytes[c], rows});
  }
  void expect_rows(const GatherBatch& b, const std::vector<int64_t>& indices) const {
    ASSERT_TRUE(b.status.is_ok()) << b.status.to_string();
    ASSERT_EQ(b.rows, static_cast<int64_t>(indices.size()));
    ASSERT_EQ(b.columns.size(), columns.size());
    for (size_t c = 0; c < columns.size(); ++c) {
      const size_t rb = static_cast<size_t>(columns[c].row_bytes);
      for (size_t r = 0; r < indices.size(); ++r) {
        const int64_t i = indices[r] < 0 ? indices[r] + columns[c].rows : indices[r];
        ASSERT_EQ(std::memcmp(b.columns[c].get() + r * rb, data[c].data() + i * rb, rb), 0)
            << "column " << c << " row " << r << " (index " << indices[r] << ")";
      }
    }
  }
};

GatherBatch wait_ok(Gatherer& g, int64_t ticket) {
  Result<GatherBatch> r = g.wait(ticket);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : GatherBatch{};
}

TEST(GatherTest, CopiesTheIndexedRowsOfEveryColumn) {
  Columns d(100, {12, 8, 1});
  auto g = Gatherer::create(d.columns, {.num_threads = 2}).value();
  std::vector<int64_t> idx = {5, 99, 0, 5, -1, -100, 42};
  const int64_t t = g->submit(idx).value();
  d.expect_rows(wait_ok(*g, t), idx);
}

// Large batches are split into chunks copied by several threads (and the waiting consumer); small chunks
// force many of them, so every row's place in the output is checked across chunk boundaries.
TEST(GatherTest, ChunkedAcrossThreadsMatchesSequentialCopy) {
  Columns d(1000, {3000, 8});
  auto g = Gatherer::create(d.columns, {.num_threads = 3, .min_chunk_bytes = 4096}).value();
  std::mt19937 rng(1);
  std::vector<int64_t> idx(777);
  for (auto& i : idx) i = static_cast<int64_t>(rng() % 1000);
  const int64_t t = g->submit(idx).value();
  d.expect_rows(wait_ok(*g, t), idx);
}

TEST(GatherTest, ManyJobsInFlightComeBackInTheirOwnBuffers) {
  Columns d(64, {256});
  auto g = Gatherer::create(d.columns, {.num_threads = 2, .min_chunk_bytes = 512}).value();
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> tickets;
  for (int b = 0; b < 20; ++b) {
    std::vector<int64_t> idx(10 + b % 7);
    std::iota(idx.begin(), idx.end(), b);
    for (auto& i : idx) i %= 64;
    tickets.push_back(g->submit(idx).value());
    batches.push_back(idx);
  }
  std::vector<GatherBatch> kept;  // consumers may keep every batch: each must be its own memory
  for (size_t b = 0; b < tickets.size(); ++b) kept.push_back(wait_ok(*g, tickets[b]));
  for (size_t b = 0; b < kept.size(); ++b) d.expect_rows(kept[b], batches[b]);
}

TEST(GatherTest, OutOfRangeIndexFailsOnlyItsBatchAndNamesIndexAndLength) {
  Columns d(10, {4});
  auto g = Gatherer::create(d.columns, {.num_threads = 1}).value();
  const int64_t good = g->submit(std::vector<int64_t>{1, 2}).value();
  const int64_t bad = g->submit(std::vector<int64_t>{3, 10}).value();
  const int64_t low = g->submit(std::vector<int64_t>{-11}).value();
  const int64_t after = g->submit(std::vector<int64_t>{9}).value();
  d.expect_rows(wait_ok(*g, good), {1, 2});
  GatherBatch b = wait_ok(*g, bad);
  EXPECT_FALSE(b.status.is_ok());
  ASSERT_TRUE(b.bad_index.has_value());
  EXPECT_EQ(*b.bad_index, 10);
  EXPECT_NE(b.status.message().find("index 10"), std::string::npos) << b.status.message();
  EXPECT_NE(b.status.message().find("10 samples"), std::string::npos) << b.status.message();
  EXPECT_EQ(wait_ok(*g, low).bad_index.value_or(0), -11);
  d.expect_rows(wait_ok(*g, after), {9});
}

TEST(GatherTest, EmptyBatchAndUnknownTicket) {
  Columns d(4, {4});
  auto g = Gatherer::create(d.columns).value();
  const int64_t t = g->submit(std::vector<int64_t>{}).value();
  EXPECT_EQ(wait_ok(*g, t).rows, 0);
  EXPECT_EQ(g->wait(t).status().code(), StatusCode::kInvalidArgument);  // waited for already
}

TEST(GatherTest, RejectsColumnsOfDifferentLengths) {
  Columns a(4, {4}), b(5, {4});
  auto r = Gatherer::create({a.columns[0], b.columns[0]});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("5 rows"), std::string::npos) << r.status().message();
  EXPECT_FALSE(Gatherer::create({}).is_ok());
}

// Freed buffers are reused (no new allocation once the pipeline is warm), and a buffer held by the
// consumer is never handed out again while it is held.
TEST(GatherTest, BuffersAreRecycledOnlyAfterRelease) {
  Columns d(16, {1024});
  auto g = Gatherer::create(d.columns, {.num_threads = 1}).value();
  std::vector<int64_t> idx = {1, 2, 3};
  GatherBatch held = wait_ok(*g, g->submit(idx).value());
  for (int i = 0; i < 10; ++i) {
    GatherBatch b = wait_ok(*g, g->submit(std::vector<int64_t>{4, 5, 6}).value());
    EXPECT_NE(b.columns[0].get(), held.columns[0].get());
  }
  EXPECT_EQ(g->pool().allocations(), 2);
  d.expect_rows(held, idx);
}

TEST(GatherTest, BatchOutlivesGathererAndCloseIsIdempotent) {
  Columns d(8, {16});
  GatherBatch b;
  {
    auto g = Gatherer::create(d.columns).value();
    b = wait_ok(*g, g->submit(std::vector<int64_t>{7, 0}).value());
    g->close();
    g->close();
    EXPECT_EQ(g->submit(std::vector<int64_t>{1}).status().code(), StatusCode::kCancelled);
  }
  d.expect_rows(b, {7, 0});
}

TEST(GatherTest, ParkFinishesQueuedJobsStopsThreadsAndSubmitRestartsThem) {
  Columns d(64, {4096});
  auto g = Gatherer::create(d.columns, {.num_threads = 2, .min_chunk_bytes = 4096}).value();
  EXPECT_EQ(g->num_threads(), 2);
  std::vector<int64_t> idx(64);
  for (int64_t i = 0; i < 64; ++i) idx[i] = 63 - i;
  std::vector<int64_t> tickets;
  for (int i = 0; i < 4; ++i) tickets.push_back(g->submit(idx).value());
  g->park();  // queued jobs are copied before the threads exit
  g->park();
  EXPECT_EQ(g->num_threads(), 0);
  for (int64_t t : tickets) d.expect_rows(wait_ok(*g, t), idx);
  GatherBatch again = wait_ok(*g, g->submit(idx).value());
  EXPECT_EQ(g->num_threads(), 2);
  d.expect_rows(again, idx);
  g->park();
  g->close();
  g->park();  // no-op after close
  EXPECT_EQ(g->submit(idx).status().code(), StatusCode::kCancelled);
}

TEST(GatherTest, TimeoutReturnsDeadlineExceededOrTheBatch) {
  Columns d(4, {4});
  auto g = Gatherer::create(d.columns).value();
  const int64_t t = g->submit(std::vector<int64_t>{1}).value();
  Result<GatherBatch> r = g->wait(t, std::chrono::milliseconds(1000));
  ASSERT_TRUE(r.is_ok());
  d.expect_rows(r.value(), {1});
}

}  // namespace
}  // namespace chute
