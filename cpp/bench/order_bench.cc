// The cost of an epoch's order: building an EpochOrder and computing every index of it, for 10M samples.
// EpochOrder holds no table (a keyed Feistel permutation), so its memory is its own few bytes. The
// shard-window order holds O(shards): 10M samples in 10,000 shards of 1,000, windows of 8.
#include <benchmark/benchmark.h>

#include "chute/order/sampler.h"

namespace chute {
namespace {

void BM_EpochOrder(benchmark::State& state) {
  const int64_t n = state.range(0);
  uint64_t epoch = 0;
  for (auto _ : state) {
    const EpochOrder order(n, /*shuffle=*/true, /*seed=*/1, epoch++);
    int64_t sum = 0;
    for (int64_t k = 0; k < order.size(); ++k) sum += order[k];
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["order_bytes"] = sizeof(EpochOrder);
  state.counters["ns_per_index"] = benchmark::Counter(
      static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EpochOrder)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ShardWindowOrder(benchmark::State& state) {
  const int64_t shards = state.range(0), per_shard = 1000;
  const ShardWindows windows{std::vector<int64_t>(static_cast<size_t>(shards), per_shard), 8};
  uint64_t epoch = 0;
  for (auto _ : state) {
    const EpochOrder order(windows, /*shuffle=*/true, /*seed=*/1, epoch++);
    int64_t sum = 0;
    for (int64_t k = 0; k < order.size(); ++k) sum += order[k];
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * shards * per_shard);
  state.counters["ns_per_index"] =
      benchmark::Counter(static_cast<double>(shards * per_shard),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ShardWindowOrder)->Arg(10'000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace chute
