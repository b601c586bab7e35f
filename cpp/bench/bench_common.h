// Shared input and reporting for chute_bench: encoded JPEGs held in memory, loaded once before the
// benchmarks run, and the counters every benchmark reports.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chute/io/source.h"
#include "chute/transform/transforms.h"

namespace chute::bench {

struct BenchData {
  std::vector<std::vector<uint8_t>> files;  // encoded JPEGs
  std::string origin;                       // where they came from, for the report
  std::shared_ptr<const Source> source;     // the same files as an in-memory Source
};

// The input, loaded on first use (main() loads it before any benchmark runs).
const BenchData& bench_data();

// The torchvision ImageNet pipelines.
Normalize imagenet_normalize();
Pipeline train_pipeline();  // RandomResizedCrop(224) + RandomHorizontalFlip + Normalize
Pipeline eval_pipeline();   // Resize(256) + CenterCrop(224) + Normalize

// Times the benchmark's loop in wall-clock time (started at construction) and, at finish(), reports
// items_processed = images, bytes_processed = `bytes` and a per-image time in milliseconds.
class Meter {
 public:
  Meter() : start_(std::chrono::steady_clock::now()) {}
  void finish(benchmark::State& state, int64_t images, int64_t bytes) const;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace chute::bench
