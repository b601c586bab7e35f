// The packed format: opening a 1M-sample dataset (hot and cold page cache), the first batch after opening
// it, and what checking each record's checksum on read costs.
//
// The 1M-sample dataset is synthetic: sample i is one of 16 small real JPEGs (32x32, about 700 bytes),
// with key "class_<i % 1000>/img_<i>.jpg" and label i % 1000, packed by chute::pack() into 256 MB shards
// under $CHUTE_BENCH_1M_DIR (default: $TMPDIR/chute_bench_1m) the first time a benchmark needs it and
// reused afterwards. Cold-cache runs drop the index and shards from the page cache before each iteration
// (posix_fadvise DONTNEED, after the previous iteration unmapped them).
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "bench_common.h"
#include "chute/engine/loader.h"
#include "chute/io/packed_source.h"
#include "chute/pack/pack_writer.h"
#include "test_util.h"

namespace chute::bench {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kSamples = 1'000'000;

class SyntheticSource final : public Source {
 public:
  SyntheticSource() {
    for (uint32_t k = 0; k < 16; ++k) jpegs_.push_back(testing::encode_jpeg(testing::synthetic_rgb(32, 32, k), 32, 32));
  }
  int64_t size() const override { return kSamples; }
  int64_t label(int64_t i) const override { return i % 1000; }
  std::string name(int64_t i) const override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "class_%03lld/img_%07lld.jpg", static_cast<long long>(i % 1000),
                  static_cast<long long>(i));
    return buf;
  }
  Status read(int64_t i, std::vector<uint8_t>& out) const override {
    out = jpegs_[static_cast<size_t>(i % 16)];
    return Status::ok();
  }

 private:
  std::vector<std::vector<uint8_t>> jpegs_;
};

// The 1M-sample dataset's directory, packed on first use.
const std::string& million() {
  static const std::string dir = [] {
    const char* env = std::getenv("CHUTE_BENCH_1M_DIR");
    const std::string d = env && *env ? env : (fs::temp_directory_path() / "chute_bench_1m").string();
    if (!fs::exists(fs::path(d) / kIndexFileName)) {
      std::fprintf(stderr, "chute_bench: packing %lld synthetic samples into %s\n", static_cast<long long>(kSamples),
                   d.c_str());
      std::vector<std::string> classes;
      for (int c = 0; c < 1000; ++c) classes.push_back("class_" + std::to_string(c));
      PackOptions o;
      o.dst = d;
      o.shard_size = uint64_t{256} << 20;
      auto r = pack(SyntheticSource(), classes, o);
      if (!r.is_ok()) {
        std::fprintf(stderr, "chute_bench: %s\n", r.status().to_string().c_str());
        std::abort();
      }
    }
    return d;
  }();
  return dir;
}

void drop_cache(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// PackedSource::open on 1M samples: maps the index and shards, checks the index's checksum and every entry.
void BM_PackedOpen1M(benchmark::State& state) {
  const std::string& dir = million();
  const bool cold = state.range(0) != 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_cache(dir);
      state.ResumeTiming();
    }
    auto src = PackedSource::open(dir);
    if (!src.is_ok()) {
      state.SkipWithError(src.status().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize((*src)->label(kSamples - 1));
    state.PauseTiming();
    src = Result<std::shared_ptr<PackedSource>>(Status(StatusCode::kCancelled, "unmapped"));  // outside the timing
    state.ResumeTiming();
  }
  state.counters["samples"] = kSamples;
}
BENCHMARK(BM_PackedOpen1M)->ArgName("cold")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// From nothing to the first batch: open the 1M-sample dataset, create a Loader (batch 256, shuffled,
// RandomResizedCrop(224) + flip + normalise, float32, 2 threads), start the epoch, receive batch one.
void BM_PackedFirstBatch1M(benchmark::State& state) {
  const std::string& dir = million();
  const bool cold = state.range(0) != 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_cache(dir);
      state.ResumeTiming();
    }
    auto src = PackedSource::open(dir);
    if (!src.is_ok()) {
      state.SkipWithError(src.status().to_string().c_str());
      return;
    }
    LoaderOptions options;
    options.batch_size = 256;
    options.shuffle = true;
    options.num_threads = 2;
    options.output = {DType::kFloat32, Layout::kNCHW};
    auto loader = Loader::create(*src, train_pipeline(), options);
    if (!loader.is_ok() || !(*loader)->start_epoch(0).is_ok()) {
      state.SkipWithError("loader");
      return;
    }
    auto batch = (*loader)->next();
    if (!batch.is_ok() || !*batch || (*batch)->size() != 256) {
      state.SkipWithError("first batch");
      return;
    }
    state.PauseTiming();
    batch = Result<std::shared_ptr<Batch>>(std::shared_ptr<Batch>());
    (*loader)->close();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_PackedFirstBatch1M)->ArgName("cold")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// read() of every bench image (ImageNet-like, about 110 KB) from a packed copy, with and without the
// XXH3 check; compare with a decode of the same images (BM_Decode*) to see the check's share.
void BM_PackedRead(benchmark::State& state) {
  struct PackedCopy {  // removed at exit
    testing::TempDir tmp;
    std::string dir = (tmp.path() / "packed").string();
    PackedCopy() {
      PackOptions o;
      o.dst = dir;
      if (!pack(*bench_data().source, {}, o).is_ok()) std::abort();
    }
  };
  static const PackedCopy copy;
  const std::string& dir = copy.dir;
  auto src = PackedSource::open(dir, {.verify_checksums = state.range(0) != 0});
  if (!src.is_ok()) {
    state.SkipWithError(src.status().to_string().c_str());
    return;
  }
  std::vector<uint8_t> out;
  int64_t images = 0, bytes = 0;
  Meter meter;
  for (auto _ : state) {
    for (int64_t i = 0; i < (*src)->size(); ++i) {
      if (!(*src)->read(i, out).is_ok()) std::abort();
      bytes += static_cast<int64_t>(out.size());
    }
    images += (*src)->size();
  }
  meter.finish(state, images, bytes);
}
BENCHMARK(BM_PackedRead)->ArgName("verify")->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
}  // namespace chute::bench
