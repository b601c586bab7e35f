// One sample's whole path (SampleProcessor::process: read, header, plan, crop-decode, resample, write)
// and the output write alone.
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_common.h"
#include "chute/engine/processor.h"
#include "chute/transform/output.h"
#include "test_util.h"

namespace chute::bench {
namespace {

// SampleProcessor::process over the in-memory source into a float32 NCHW slot, one sample per
// iteration; the pass over the files is the epoch, so the train crops are those of
// BM_CropDecodeRandomResizedCrop.
void run_processor(benchmark::State& state, const Pipeline& pipeline) {
  const BenchData& data = bench_data();
  auto writer = OutputWriter::create(pipeline.out_height(), pipeline.out_width(), {DType::kFloat32, Layout::kNCHW},
                                     pipeline.normalize());
  if (!writer.is_ok()) {
    state.SkipWithError(writer.status().to_string().c_str());
    return;
  }
  SampleProcessor processor(*data.source, pipeline, *writer);
  std::vector<uint8_t> slot(writer->sample_bytes());
  const int64_t n = data.source->size();
  int64_t images = 0, bytes = 0, i = 0;
  uint64_t pass = 0;
  Meter meter;
  for (auto _ : state) {
    const Status st = processor.process(i, {.seed = 0, .epoch = pass}, slot.data());
    if (!st.is_ok()) {
      state.SkipWithError(st.to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(slot.data());
    ++images;
    bytes += static_cast<int64_t>(data.files[i].size());
    if (++i == n) {
      i = 0;
      ++pass;
    }
  }
  meter.finish(state, images, bytes);
}

void BM_TrainTransform(benchmark::State& state) { run_processor(state, train_pipeline()); }
BENCHMARK(BM_TrainTransform)->UseRealTime();

void BM_EvalTransform(benchmark::State& state) { run_processor(state, eval_pipeline()); }
BENCHMARK(BM_EvalTransform)->UseRealTime();

// OutputWriter::write alone on a 224x224 RGB image, flipped every other time (float32 variants
// normalised). bytes_processed counts the bytes written (no JPEG is involved).
void BM_OutputWrite(benchmark::State& state, DType dtype, Layout layout) {
  constexpr int kSize = 224;
  const std::optional<Normalize> normalize =
      dtype == DType::kUInt8 ? std::nullopt : std::optional<Normalize>(imagenet_normalize());
  auto writer = OutputWriter::create(kSize, kSize, {dtype, layout}, normalize);
  if (!writer.is_ok()) {
    state.SkipWithError(writer.status().to_string().c_str());
    return;
  }
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(kSize, kSize, 7);
  std::vector<uint8_t> slot(writer->sample_bytes());
  int64_t images = 0;
  Meter meter;
  for (auto _ : state) {
    writer->write(rgb.data(), (images & 1) != 0, slot.data());
    benchmark::DoNotOptimize(slot.data());
    benchmark::ClobberMemory();
    ++images;
  }
  meter.finish(state, images, images * static_cast<int64_t>(writer->sample_bytes()));
}
BENCHMARK_CAPTURE(BM_OutputWrite, uint8_nchw, DType::kUInt8, Layout::kNCHW)->UseRealTime();
BENCHMARK_CAPTURE(BM_OutputWrite, float32_nchw, DType::kFloat32, Layout::kNCHW)->UseRealTime();
BENCHMARK_CAPTURE(BM_OutputWrite, float32_nhwc, DType::kFloat32, Layout::kNHWC)->UseRealTime();

}  // namespace
}  // namespace chute::bench
