// One sample's whole path (SampleProcessor::process: read, header, plan, crop-decode, resample, augment,
// write), the output write alone, and the pixel stage's ops and policies alone on a 224x224 image.
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

// torchvision's reference ImageNet train recipe: RandomResizedCrop(224), flip, TrivialAugmentWide, Normalize,
// RandomErasing (its MixUp/CutMix act on the batch, outside the engine).
void BM_TrainTransformTrivialAugment(benchmark::State& state) {
  auto p = Pipeline::create({RandomResizedCrop{}, RandomHorizontalFlip{}, TrivialAugmentWide{}, imagenet_normalize(),
                             RandomErasing{.p = 0.1}});
  if (!p.is_ok()) return state.SkipWithError(p.status().to_string().c_str());
  run_processor(state, *p);
}
BENCHMARK(BM_TrainTransformTrivialAugment)->UseRealTime();

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

constexpr int kAugmentSize = 224;

// One functional op at a fixed argument on a 224x224 image (PixelScratch reused, as in a worker);
// bytes_processed counts the image's bytes.
void BM_PixelOp(benchmark::State& state, PixelOp op) {
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(kAugmentSize, kAugmentSize, 7);
  std::vector<uint8_t> image = rgb;
  PixelScratch scratch;
  int64_t images = 0;
  Meter meter;
  for (auto _ : state) {
    apply_pixel_op(op, image, kAugmentSize, kAugmentSize, scratch);
    benchmark::DoNotOptimize(image.data());
    if ((++images & 15) == 0) image = rgb;  // keep the content varied (posterize and equalize converge)
  }
  meter.finish(state, images, images * static_cast<int64_t>(rgb.size()));
}

PixelOp op(PixelOpKind kind, PixelBackend backend = PixelBackend::kPil) {
  PixelOp p;
  p.kind = kind;
  p.backend = backend;
  return p;
}
PixelOp with(PixelOp p, double factor) {
  p.factor = factor;
  return p;
}
PixelOp geometry(PixelOpKind kind, Interpolation interpolation, PixelBackend backend = PixelBackend::kPil) {
  PixelOp p = op(kind, backend);
  p.interpolation = interpolation;
  if (kind == PixelOpKind::kAffine) {
    p.shear_x = 16.7;  // ShearX 0.3
    p.center = std::array<double, 2>{0.0, 0.0};
  } else {
    p.angle = 23.0;
  }
  return p;
}

BENCHMARK_CAPTURE(BM_PixelOp, shear_nearest, geometry(PixelOpKind::kAffine, Interpolation::kNearest))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, shear_bilinear, geometry(PixelOpKind::kAffine, Interpolation::kBilinear))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, translate_nearest,
                  [] {
                    PixelOp p = op(PixelOpKind::kAffine);
                    p.translate_x = 17;
                    return p;
                  }())
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, rotate_nearest, geometry(PixelOpKind::kRotate, Interpolation::kNearest))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, rotate_bilinear, geometry(PixelOpKind::kRotate, Interpolation::kBilinear))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, brightness, with(op(PixelOpKind::kBrightness), 1.4))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, color, with(op(PixelOpKind::kSaturation), 1.4))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, contrast, with(op(PixelOpKind::kContrast), 1.4))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, sharpness, with(op(PixelOpKind::kSharpness), 1.4))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, hue, with(op(PixelOpKind::kHue), 0.1))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, posterize,
                  [] {
                    PixelOp p = op(PixelOpKind::kPosterize);
                    p.bits = 4;
                    return p;
                  }())
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, solarize, with(op(PixelOpKind::kSolarize), 128))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, autocontrast, op(PixelOpKind::kAutoContrast))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, equalize, op(PixelOpKind::kEqualize))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, invert, op(PixelOpKind::kInvert))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, grayscale, op(PixelOpKind::kGrayscale))->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, tensor_shear_bilinear,
                  geometry(PixelOpKind::kAffine, Interpolation::kBilinear, PixelBackend::kTensor))
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, tensor_color, with(op(PixelOpKind::kSaturation, PixelBackend::kTensor), 1.4))
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, tensor_sharpness, with(op(PixelOpKind::kSharpness, PixelBackend::kTensor), 1.4))
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelOp, gaussian_blur_23,
                  [] {
                    PixelOp p = op(PixelOpKind::kGaussianBlur, PixelBackend::kTensor);
                    p.kernel_width = p.kernel_height = 23;
                    p.sigma_x = p.sigma_y = 1.5;
                    return p;
                  }())
    ->UseRealTime();

// A whole pixel-stage transform per image (its draws from a fresh sample stream each time, then the ops):
// the mean over its ops' mix.
void BM_PixelStage(benchmark::State& state, PixelTransform t) {
  PixelStage stage;
  if (const Status st = stage.add(std::move(t)); !st.is_ok()) return state.SkipWithError(st.to_string().c_str());
  const std::vector<uint8_t> rgb = testing::synthetic_rgb(kAugmentSize, kAugmentSize, 7);
  std::vector<uint8_t> image;
  AugmentDraws draws;
  AugmentScratch scratch;
  int64_t images = 0;
  Meter meter;
  for (auto _ : state) {
    image = rgb;
    SampleRng rng(1, 0, static_cast<uint64_t>(images));
    draws.clear();
    stage.draw(rng, kAugmentSize, kAugmentSize, draws);
    stage.apply(draws, false, image, kAugmentSize, kAugmentSize, scratch);
    benchmark::DoNotOptimize(image.data());
    ++images;
  }
  meter.finish(state, images, images * static_cast<int64_t>(rgb.size()));
}
BENCHMARK_CAPTURE(BM_PixelStage, trivial_augment_wide, TrivialAugmentWide{})->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelStage, rand_augment, RandAugment{})->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelStage, auto_augment, AutoAugment{})->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelStage, augmix, AugMix{})->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelStage, color_jitter,
                  ColorJitter{.brightness = Range{0.6, 1.4},
                              .contrast = Range{0.6, 1.4},
                              .saturation = Range{0.6, 1.4},
                              .hue = Range{-0.1, 0.1}})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PixelStage, random_affine,
                  RandomAffine{.degrees = {-15, 15}, .translate = Range{0.1, 0.1}, .scale = Range{0.9, 1.1}})
    ->UseRealTime();

// RandomErasing on a written float32 NCHW sample (p = 1, value 0), normalised.
void BM_RandomErasing(benchmark::State& state, bool random) {
  auto writer =
      OutputWriter::create(kAugmentSize, kAugmentSize, {DType::kFloat32, Layout::kNCHW}, imagenet_normalize());
  if (!writer.is_ok()) return state.SkipWithError(writer.status().to_string().c_str());
  RandomErasing t;
  t.p = 1.0;
  t.random = random;
  std::vector<uint8_t> slot(writer->sample_bytes());
  int64_t images = 0;
  Meter meter;
  for (auto _ : state) {
    SampleRng rng(1, 0, static_cast<uint64_t>(images));
    const ErasingDraw d = draw_erasing(t, rng, kAugmentSize, kAugmentSize);
    ErasingValues values(t, d);
    if (d.erase) writer->erase(slot.data(), d, values, nullptr);
    benchmark::DoNotOptimize(slot.data());
    ++images;
  }
  meter.finish(state, images, images * static_cast<int64_t>(slot.size()));
}
BENCHMARK_CAPTURE(BM_RandomErasing, zero, false)->UseRealTime();
BENCHMARK_CAPTURE(BM_RandomErasing, random, true)->UseRealTime();

}  // namespace
}  // namespace chute::bench
