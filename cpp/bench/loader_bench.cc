// Whole Loader epochs over the in-memory source: batch 64, the train pipeline, float32 NCHW.
#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>

#include "bench_common.h"
#include "chute/engine/loader.h"

namespace chute::bench {
namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One iteration is one epoch (a new shuffle and new crops each time), the last short batch included.
// The loader and its threads are created once, outside the timed loop. `cores_busy` is the process's CPU
// time over wall time: below the thread count, the threads waited (for each other or for a busy machine).
// The second argument turns the per-stage statistics off (0) or on (1, the default in the library), to
// measure what they cost.
void BM_LoaderEpoch(benchmark::State& state) {
  const BenchData& data = bench_data();
  LoaderOptions options;
  options.batch_size = 64;
  options.shuffle = true;
  options.seed = 0;
  options.num_threads = static_cast<int>(state.range(0));
  options.prefetch = 2;
  options.collect_stats = state.range(1) != 0;
  options.output = {DType::kFloat32, Layout::kNCHW};
  auto loader = Loader::create(data.source, train_pipeline(), options);
  if (!loader.is_ok()) {
    state.SkipWithError(loader.status().to_string().c_str());
    return;
  }
  int64_t epoch_bytes = 0;
  for (const auto& f : data.files) epoch_bytes += static_cast<int64_t>(f.size());
  int64_t images = 0, bytes = 0;
  uint64_t epoch = 0;
  Meter meter;
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    if (!(*loader)->start_epoch(epoch++).is_ok()) std::abort();
    for (;;) {
      auto batch = (*loader)->next();
      if (!batch.is_ok()) {
        state.SkipWithError(batch.status().to_string().c_str());
        break;
      }
      if (!*batch) break;
      images += (*batch)->size();
      benchmark::DoNotOptimize((*batch)->images());
    }
    bytes += epoch_bytes;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  meter.finish(state, images, bytes);
  state.counters["cores_busy"] = wall > 0 ? (process_cpu_seconds() - cpu_start) / wall : 0.0;
  (*loader)->close();
}
BENCHMARK(BM_LoaderEpoch)->ArgNames({"threads", "stats"})->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime();

}  // namespace
}  // namespace chute::bench
