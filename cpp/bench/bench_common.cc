#include "bench_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "chute/decode/jpeg_decoder.h"
#include "chute/io/image_folder.h"
#include "chute/transform/resample.h"
#include "test_util.h"

namespace chute::bench {
namespace {

constexpr int kDefaultFiles = 200;

// Mirrors python/chute/bench/dataset.py: $CHUTE_BENCH_DATASET, else the cached bench dataset.
std::filesystem::path dataset_dir() {
  if (const char* d = std::getenv("CHUTE_BENCH_DATASET"); d && *d) return d;
  std::filesystem::path cache;
  if (const char* c = std::getenv("CHUTE_CACHE_DIR"); c && *c) {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    cache = std::filesystem::path(x) / "chute";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    cache = std::filesystem::path(h) / ".cache" / "chute";
  }
  return cache.empty() ? std::filesystem::path() : cache / "bench-imagenet-like-v1";
}

int files_wanted() {
  const char* n = std::getenv("CHUTE_BENCH_FILES");
  const int v = n ? std::atoi(n) : 0;
  return v > 0 ? v : kDefaultFiles;
}

// Up to `n` JPEGs spread evenly over the folder's sorted listing (so every class is represented).
bool load_folder(const std::filesystem::path& dir, int n, BenchData& data) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return false;
  auto folder = ImageFolder::open(dir.string());
  if (!folder.is_ok()) {
    std::fprintf(stderr, "chute_bench: %s: %s; using synthetic images\n", dir.c_str(),
                 folder.status().to_string().c_str());
    return false;
  }
  const int64_t size = (*folder)->size();
  const int64_t take = std::min<int64_t>(n, size);
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < take; ++i) {
    const int64_t index = i * size / take;
    if (!(*folder)->read(index, bytes).is_ok() || !JpegDecoder::is_jpeg(bytes)) continue;
    data.files.push_back(bytes);
  }
  if (data.files.empty()) return false;
  data.origin = dir.string();
  return true;
}

// ImageNet-like synthetic JPEGs: 500x375, quality 90-96, 4:4:4.
void make_synthetic(int n, BenchData& data) {
  constexpr int kWidth = 500, kHeight = 375;
  for (int i = 0; i < n; ++i) {
    const auto rgb = testing::synthetic_rgb(kWidth, kHeight, static_cast<uint32_t>(i));
    data.files.push_back(testing::encode_jpeg(rgb, kWidth, kHeight, {.quality = 90 + i % 7}));
  }
  data.origin = "synthetic 500x375, q90-96, 4:4:4";
}

BenchData load() {
  BenchData data;
  const int n = files_wanted();
  if (!load_folder(dataset_dir(), n, data)) make_synthetic(n, data);
  data.source = std::make_shared<testing::MemorySource>(data.files);
  return data;
}

}  // namespace

const BenchData& bench_data() {
  static const BenchData data = load();
  return data;
}

Normalize imagenet_normalize() { return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}; }

namespace {
Pipeline must(Result<Pipeline> p) {
  if (!p.is_ok()) {
    std::fprintf(stderr, "chute_bench: %s\n", p.status().to_string().c_str());
    std::abort();
  }
  return std::move(p).value();
}
}  // namespace

Pipeline train_pipeline() {
  return must(Pipeline::create({RandomResizedCrop{224, 224}, RandomHorizontalFlip{}, imagenet_normalize()}));
}

Pipeline eval_pipeline() {
  return must(Pipeline::create({Resize{256, 0}, CenterCrop{224, 224}, imagenet_normalize()}));
}

void Meter::finish(benchmark::State& state, int64_t images, int64_t bytes) const {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  state.SetItemsProcessed(images);
  state.SetBytesProcessed(bytes);
  state.counters["ms_per_img"] = images > 0 ? 1e3 * seconds / static_cast<double>(images) : 0.0;
}

}  // namespace chute::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto& data = chute::bench::bench_data();
  size_t bytes = 0;
  int64_t pixels = 0;
  chute::JpegDecoder decoder;
  for (const auto& f : data.files) {
    bytes += f.size();
    if (auto info = decoder.read_info(f); info.is_ok()) pixels += int64_t{info->width} * info->height;
  }
  const size_t n = data.files.size();
  benchmark::AddCustomContext("chute_images", std::to_string(n) + " from " + data.origin);
  benchmark::AddCustomContext("chute_mean_jpeg_kb", std::to_string(bytes / 1024 / std::max<size_t>(n, 1)));
  benchmark::AddCustomContext("chute_mean_megapixels",
                              std::to_string(static_cast<double>(pixels) / 1e6 / std::max<size_t>(n, 1)));
  benchmark::AddCustomContext("chute_resample_kernels", chute::resample_kernels());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
