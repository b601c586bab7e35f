// Decode and resample alone: whole-image decode, RandomResizedCrop crop-on-decode, and the resampler's
// AVX2 kernels against its portable ones.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "bench_common.h"
#include "chute/base/rng.h"
#include "chute/decode/jpeg_decoder.h"
#include "chute/engine/reference.h"
#include "chute/transform/resample.h"
#include "chute/transform/transforms.h"

namespace chute::bench {
namespace {

// One image per iteration, cycling over the files, decoded by chute::reference_decode: the same step
// `chute bench` times for its references.
void decode_benchmark(benchmark::State& state, const ReferenceWindow& keep) {
  const auto& files = bench_data().files;
  JpegDecoder decoder;
  std::vector<uint8_t> pixels;
  int64_t images = 0, bytes = 0;
  size_t i = 0;
  uint64_t pass = 0;
  Meter meter;
  for (auto _ : state) {
    const auto& file = files[i];
    const Status st = reference_decode(decoder, file, keep, pass, i, pixels);
    if (!st.is_ok()) {
      state.SkipWithError(st.to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(pixels.data());
    ++images;
    bytes += static_cast<int64_t>(file.size());
    if (++i == files.size()) {
      i = 0;
      ++pass;
    }
  }
  meter.finish(state, images, bytes);
}

// Whole images.
void BM_FullDecode(benchmark::State& state) { decode_benchmark(state, {}); }
BENCHMARK(BM_FullDecode)->UseRealTime();

// Each image's RandomResizedCrop window only, drawn as the loader draws it (seed 0, the pass over the
// files as epoch): what BM_TrainTransform does before resampling.
void BM_CropDecodeRandomResizedCrop(benchmark::State& state) {
  decode_benchmark(state, {.crop = RandomResizedCrop{224, 224}});
}
BENCHMARK(BM_CropDecodeRandomResizedCrop)->UseRealTime();

// The window Resize(256) + CenterCrop(224) plans: what BM_EvalTransform decodes before resampling.
void BM_CropDecodeEval(benchmark::State& state) { decode_benchmark(state, {.pipeline = eval_pipeline()}); }
BENCHMARK(BM_CropDecodeEval)->UseRealTime();

// resample_rgb alone, from a decoded window of a typical RandomResizedCrop size (330x250, clamped to the
// first image) to 224x224. bytes_processed counts the window's RGB bytes (no JPEG is involved).
void BM_Resample(benchmark::State& state, const char* kernels) {
  const auto& file = bench_data().files.front();
  JpegDecoder decoder;
  auto info = decoder.read_info(file);
  if (!info.is_ok()) {
    state.SkipWithError(info.status().to_string().c_str());
    return;
  }
  const int w = std::min(330, info->width), h = std::min(250, info->height);
  const Window window{(info->width - w) / 2, (info->height - h) / 2, w, h};
  std::vector<uint8_t> pixels;
  auto view = decoder.decode(file, window, pixels, kResampleInputPadding);
  if (!view.is_ok()) {
    state.SkipWithError(view.status().to_string().c_str());
    return;
  }
  const AxisCoeffs xs = AxisCoeffs::bilinear(w, 224, 0, 224);
  const AxisCoeffs ys = AxisCoeffs::bilinear(h, 224, 0, 224);
  std::vector<uint8_t> out(224 * 224 * 3);
  ResampleScratch scratch;
  if (!use_resample_kernels(kernels)) {
    state.SkipWithError("this CPU cannot run these kernels");
    return;
  }
  state.SetLabel(std::to_string(w) + "x" + std::to_string(h) + "->224x224");
  int64_t images = 0;
  Meter meter;
  for (auto _ : state) {
    resample_rgb(view->pixels, view->pitch, xs, ys, out.data(), scratch);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    ++images;
  }
  meter.finish(state, images, images * int64_t{w} * h * 3);
  use_resample_kernels("");
}
BENCHMARK_CAPTURE(BM_Resample, portable, "portable")->UseRealTime();
BENCHMARK_CAPTURE(BM_Resample, avx2, "avx2")->UseRealTime();
BENCHMARK_CAPTURE(BM_Resample, avx512, "avx512")->UseRealTime();

}  // namespace
}  // namespace chute::bench
