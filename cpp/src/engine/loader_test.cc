#include "chute/engine/loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "chute/order/sampler.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::MemorySource;

constexpr int kClasses = 1 << 30;  // label == source index, so batches say which samples they hold

// Sizes vary from w x h up to (w + 6) x (h + 4) unless `vary` is false.
std::vector<std::vector<uint8_t>> make_images(int n, int w = 48, int h = 40, bool vary = true) {
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < n; ++i) {
    const int iw = vary ? w + i % 7 : w, ih = vary ? h + i % 5 : h;
    images.push_back(testing::encode_jpeg(testing::synthetic_rgb(iw, ih, i), iw, ih));
  }
  return images;
}

struct EpochRun {
  std::vector<int64_t> labels;
  std::vector<int64_t> sizes;
  std::map<int64_t, std::vector<uint8_t>> pixels;  // label -> sample bytes
  std::vector<uint8_t> all_bytes;
  Status error;
};

std::unique_ptr<Loader> make_loader(std::shared_ptr<const Source> source, std::vector<Transform> transforms,
                                    LoaderOptions options) {
  auto pipeline = Pipeline::create(std::move(transforms));
  EXPECT_TRUE(pipeline.is_ok()) << pipeline.status().to_string();
  auto loader = Loader::create(std::move(source), std::move(*pipeline), options);
  EXPECT_TRUE(loader.is_ok()) << loader.status().to_string();
  return std::move(*loader);
}

EpochRun run_epoch(Loader& loader, uint64_t epoch = 0) {
  EpochRun run;
  EXPECT_TRUE(loader.start_epoch(epoch).is_ok());
  const size_t sample_bytes =
      static_cast<size_t>(loader.out_height()) * loader.out_width() * 3 * dtype_size(loader.options().output.dtype);
  for (;;) {
    auto batch = loader.next();
    if (!batch.is_ok()) {
      run.error = batch.status();
      break;
    }
    if (!*batch) break;
    const Batch& b = **batch;
    run.sizes.push_back(b.size());
    for (int64_t i = 0; i < b.size(); ++i) {
      const auto* p = static_cast<const uint8_t*>(b.images()) + i * sample_bytes;
      run.labels.push_back(b.labels()[i]);
      run.pixels[b.labels()[i]].assign(p, p + sample_bytes);
      run.all_bytes.insert(run.all_bytes.end(), p, p + sample_bytes);
    }
  }
  return run;
}

TEST(LoaderTest, DeliversEverySampleOnceInOrder) {
  auto source = std::make_shared<MemorySource>(make_images(37), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 8, .num_threads = 3});
  EXPECT_EQ(loader->num_batches(), 5);
  const EpochRun run = run_epoch(*loader);
  ASSERT_TRUE(run.error.is_ok()) << run.error.to_string();
  EXPECT_EQ(run.sizes, (std::vector<int64_t>{8, 8, 8, 8, 5}));
  for (int64_t i = 0; i < 37; ++i) ASSERT_EQ(run.labels[i], i);
}

TEST(LoaderTest, PixelsAreTheDecodedCentreCrop) {
  auto images = make_images(5, 40, 40, /*vary=*/false);
  auto source = std::make_shared<MemorySource>(images, kClasses);
  auto loader = make_loader(source, {CenterCrop{40, 40}},
                            {.batch_size = 2, .num_threads = 2, .output = {DType::kUInt8, Layout::kNHWC}});
  const EpochRun run = run_epoch(*loader);
  for (int i = 0; i < 5; ++i) {
    int w, h;
    EXPECT_EQ(run.pixels.at(i), testing::reference_decode(images[i], &w, &h)) << "sample " << i;
  }
}

TEST(LoaderTest, ShuffleFollowsEpochOrderAndDropLastDropsTheTail) {
  auto source = std::make_shared<MemorySource>(make_images(23), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}},
                            {.batch_size = 5, .shuffle = true, .seed = 9, .drop_last = true, .num_threads = 2});
  EXPECT_EQ(loader->num_batches(), 4);
  const EpochRun run = run_epoch(*loader, 3);
  const EpochOrder order(23, true, 9, 3);
  ASSERT_EQ(run.labels.size(), 20u);
  for (int64_t k = 0; k < 20; ++k) ASSERT_EQ(run.labels[k], order[k]);
}

TEST(LoaderTest, SameSeedGivesIdenticalBytesWhateverTheThreadCount) {
  auto source = std::make_shared<MemorySource>(make_images(30, 64, 48), kClasses);
  std::vector<Transform> t{RandomResizedCrop{24, 24}, RandomHorizontalFlip{},
                           Normalize{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}};
  std::vector<uint8_t> reference;
  for (int threads : {1, 2, 4}) {
    auto loader = make_loader(source, t,
                              {.batch_size = 4,
                               .shuffle = true,
                               .seed = 5,
                               .num_threads = threads,
                               .prefetch = 3,
                               .output = {DType::kFloat32, Layout::kNCHW}});
    const EpochRun run = run_epoch(*loader, 1);
    if (reference.empty()) reference = run.all_bytes;
    EXPECT_EQ(run.all_bytes, reference) << threads << " threads";
    EXPECT_NE(run_epoch(*loader, 2).all_bytes, reference);  // another epoch, other augmentations
  }
}

TEST(LoaderTest, SkipPolicyKeepsBatchesFullAndPixelsRight) {
  auto images = make_images(60);
  auto clean = std::make_shared<MemorySource>(images, kClasses);
  std::set<int64_t> bad{3, 9, 10, 11, 30, 41, 59};
  for (int64_t i : bad) images[i].resize(images[i].size() / 2);  // truncated
  auto broken = std::make_shared<MemorySource>(images, kClasses);
  const LoaderOptions opts{.batch_size = 4, .num_threads = 4, .prefetch = 3, .on_error = ErrorPolicy::kSkip};
  auto reference = run_epoch(*make_loader(clean, {CenterCrop{32, 32}}, opts));
  auto loader = make_loader(broken, {CenterCrop{32, 32}}, opts);
  for (int epoch = 0; epoch < 3; ++epoch) {
    const EpochRun run = run_epoch(*loader, epoch);
    ASSERT_TRUE(run.error.is_ok());
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < 60; ++i)
      if (!bad.count(i)) expected.push_back(i);
    EXPECT_EQ(run.labels, expected);
    EXPECT_EQ(run.sizes, (std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1}));
    for (int64_t i : expected) ASSERT_EQ(run.pixels.at(i), reference.pixels.at(i)) << "sample " << i;
  }
  const auto errors = loader->errors();
  ASSERT_EQ(errors.size(), 3 * bad.size());
  EXPECT_EQ(errors[0].index, 3);
  EXPECT_EQ(errors[0].path, "mem://3");
  EXPECT_EQ(errors[0].status.code(), StatusCode::kCorruptData);
}

TEST(LoaderTest, RaisePolicyDeliversEarlierBatchesThenNamesTheSample) {
  auto images = make_images(30);
  images[13] = {0xFF, 0xD8, 0xFF, 0x00};  // a JPEG that ends at once
  auto source = std::make_shared<MemorySource>(images, kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 5, .num_threads = 2});
  const EpochRun run = run_epoch(*loader);
  EXPECT_EQ(run.sizes, (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(run.error.code(), StatusCode::kCorruptData);
  EXPECT_NE(run.error.message().find("sample 13 (mem://13)"), std::string::npos) << run.error.message();
  ASSERT_TRUE(loader->failed_sample().has_value());
  EXPECT_EQ(loader->failed_sample()->index, 13);
  // The loader is usable again: the next epoch fails at the same place.
  EXPECT_EQ(run_epoch(*loader, 1).sizes.size(), 2u);
}

// I/O errors from the source (a failing disk, a vanished mount) follow the error policy like corrupt data:
// kRaise names the sample after the batches before it and leaves the loader usable; kSkip records it
// and keeps batches full. Every sample is read exactly once per epoch, the failing ones included.
TEST(LoaderTest, SourceReadErrorsFollowTheErrorPolicy) {
  const std::set<int64_t> failing{0, 6, 7, 25};
  auto source =
      std::make_shared<testing::FailingSource>(std::make_shared<MemorySource>(make_images(26), kClasses), failing);
  auto raising = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 4, .num_threads = 3});
  EpochRun run = run_epoch(*raising);
  EXPECT_TRUE(run.sizes.empty());  // sample 0 fails: no batch comes before it
  EXPECT_EQ(run.error.code(), StatusCode::kIoError);
  EXPECT_NE(run.error.message().find("sample 0 (mem://0): IoError: read failed: Input/output error"), std::string::npos)
      << run.error.message();
  ASSERT_TRUE(raising->failed_sample().has_value());
  EXPECT_EQ(raising->failed_sample()->index, 0);
  ASSERT_TRUE(raising->start_epoch(1, 1).is_ok());  // resume past it: the next failure is sample 6
  auto b = raising->next();
  ASSERT_TRUE(b.is_ok() && *b);
  EXPECT_EQ((*b)->labels()[0], 1);
  b = raising->next();
  EXPECT_FALSE(b.is_ok());
  EXPECT_EQ(raising->failed_sample()->index, 6);
  raising->close();  // the raising loader's epoch goes on after an error: stop its reads before counting

  const int64_t reads_before = source->reads();
  auto skipping = make_loader(source, {CenterCrop{32, 32}},
                              {.batch_size = 4, .num_threads = 3, .prefetch = 2, .on_error = ErrorPolicy::kSkip});
  run = run_epoch(*skipping);
  ASSERT_TRUE(run.error.is_ok()) << run.error.to_string();
  EXPECT_EQ(run.sizes, (std::vector<int64_t>{4, 4, 4, 4, 4, 2}));
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < 26; ++i)
    if (!failing.count(i)) expected.push_back(i);
  EXPECT_EQ(run.labels, expected);
  EXPECT_EQ(source->reads() - reads_before, 26);
  const auto errors = skipping->errors();
  ASSERT_EQ(errors.size(), failing.size());
  for (size_t k = 0; k < errors.size(); ++k) {
    EXPECT_EQ(errors[k].index, *std::next(failing.begin(), static_cast<long>(k)));
    EXPECT_EQ(errors[k].status.code(), StatusCode::kIoError);
    EXPECT_EQ(errors[k].path, "mem://" + std::to_string(errors[k].index));
  }
}

TEST(LoaderTest, RestartingMidEpochStartsClean) {
  auto source = std::make_shared<MemorySource>(make_images(40), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 4, .num_threads = 2, .prefetch = 4});
  ASSERT_TRUE(loader->start_epoch(0).is_ok());
  auto first = loader->next();
  ASSERT_TRUE(first.is_ok() && *first);
  const EpochRun run = run_epoch(*loader, 1);  // abandons epoch 0 with work in flight
  EXPECT_EQ(run.labels.size(), 40u);
  EXPECT_EQ(run.labels.front(), 0);
}

TEST(LoaderTest, ConsumerHoldingEveryBufferGetsAnErrorNotADeadlock) {
  auto source = std::make_shared<MemorySource>(make_images(40), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}},
                            {.batch_size = 2, .num_threads = 2, .prefetch = 1, .max_ring_bytes = 1});
  ASSERT_TRUE(loader->start_epoch(0).is_ok());
  std::vector<std::shared_ptr<Batch>> held;
  Status error;
  for (int i = 0; i < 20; ++i) {
    auto b = loader->next();
    if (!b.is_ok()) {
      error = b.status();
      break;
    }
    held.push_back(*b);
  }
  EXPECT_EQ(error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(held.size(), 3u);  // prefetch + 2 buffers, all held
  held.clear();
  EXPECT_EQ(run_epoch(*loader, 1).labels.size(), 40u);
}

TEST(LoaderTest, RingGrowsWithinBudgetWhenTheConsumerKeepsBatches) {
  auto source = std::make_shared<MemorySource>(make_images(20), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 2, .num_threads = 2, .prefetch = 1});
  ASSERT_TRUE(loader->start_epoch(0).is_ok());
  std::vector<std::shared_ptr<Batch>> held;
  for (;;) {
    auto b = loader->next();
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    if (!*b) break;
    held.push_back(*b);
  }
  EXPECT_EQ(held.size(), 10u);
  std::set<void*> distinct;
  for (auto& b : held) distinct.insert(b->images());
  EXPECT_EQ(distinct.size(), 10u);  // never a buffer still referenced
}

// Growing the ring pins a new buffer (cudaHostAlloc: milliseconds, and a device-wide cost), so it must run
// without the loader's lock: the consumer and the other workers go on meanwhile. The allocator asks the
// loader for its position (which takes the lock) from another thread and waits for the answer, boundedly.
TEST(LoaderTest, RingGrowthAllocatesWithoutTheLoaderLock) {
  struct Probe final : HostAllocator {
    Loader* loader = nullptr;  // set once built: the first slots are allocated by the constructor
    std::atomic<int> grown{0}, under_lock{0}, answered{0};
    void* allocate(size_t bytes) override {
      if (loader != nullptr) {
        ++grown;
        auto answer = std::make_shared<std::promise<void>>();
        std::future<void> ready = answer->get_future();
        std::thread([this, answer] {  // detached: with the lock held here, it can only answer afterwards
          (void)loader->position();
          answer->set_value();
          ++answered;
        })
            .detach();
        if (ready.wait_for(std::chrono::seconds(5)) != std::future_status::ready) ++under_lock;
      }
      return heap_allocator()->allocate(bytes);
    }
    void deallocate(void* p, size_t bytes) noexcept override { heap_allocator()->deallocate(p, bytes); }
    bool pinned() const override { return false; }
    std::string name() const override { return "probe"; }
  };
  auto probe = std::make_shared<Probe>();
  auto source = std::make_shared<MemorySource>(make_images(12), kClasses);
  LoaderOptions options{.batch_size = 2, .num_threads = 2, .prefetch = 1};
  options.host_allocator = probe;
  auto loader = make_loader(source, {CenterCrop{32, 32}}, options);
  probe->loader = loader.get();
  ASSERT_TRUE(loader->start_epoch(0).is_ok());
  std::vector<std::shared_ptr<Batch>> held;  // the ring must grow
  for (;;) {
    auto b = loader->next();
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    if (!*b) break;
    held.push_back(*b);
  }
  EXPECT_EQ(held.size(), 6u);
  EXPECT_GT(probe->grown.load(), 0);
  EXPECT_EQ(probe->under_lock.load(), 0) << "a ring buffer was allocated with the loader's lock held";
  for (int i = 0; i < 3000 && probe->answered.load() < probe->grown.load(); ++i)  // the probes, before the loader goes
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(probe->answered.load(), probe->grown.load());
  held.clear();
  loader->close();
}

TEST(LoaderTest, BatchOutlivesItsLoader) {
  auto source = std::make_shared<MemorySource>(make_images(8), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 4, .num_threads = 2});
  ASSERT_TRUE(loader->start_epoch(0).is_ok());
  auto batch = loader->next();
  ASSERT_TRUE(batch.is_ok() && *batch);
  std::shared_ptr<Batch> kept = *batch;
  loader.reset();
  EXPECT_EQ(kept->labels()[3], 3);
  kept.reset();  // returns its buffer to a ring that only the batch kept alive
}

TEST(LoaderTest, EmptySourceAndBadOptions) {
  auto empty = std::make_shared<MemorySource>(std::vector<std::vector<uint8_t>>{}, kClasses);
  auto loader = make_loader(empty, {CenterCrop{32, 32}}, {.batch_size = 4, .num_threads = 1});
  EXPECT_EQ(loader->num_batches(), 0);
  EXPECT_TRUE(run_epoch(*loader).labels.empty());
  auto pipeline = Pipeline::create({CenterCrop{32, 32}});
  EXPECT_FALSE(Loader::create(empty, *pipeline, {.batch_size = 0}).is_ok());
  EXPECT_FALSE(Loader::create(empty, *pipeline, {.batch_size = 1, .prefetch = -1}).is_ok());
  EXPECT_FALSE(Loader::create(empty, *pipeline, {.batch_size = 1, .num_threads = 4, .max_threads = 2}).is_ok());
  // Auto prefetch needs room for 3 buffers of 1 x 32 x 32 x 3 bytes (+ a label) within max_memory.
  EXPECT_FALSE(Loader::create(empty, *pipeline, {.batch_size = 1, .max_memory = 3000}).is_ok());
  EXPECT_TRUE(Loader::create(empty, *pipeline, {.batch_size = 1, .max_memory = 3 * (3072 + 8)}).is_ok());
  EXPECT_FALSE(Loader::create(empty, *pipeline, {.batch_size = 1, .collect_stats = false}).is_ok());  // auto
  EXPECT_TRUE(
      Loader::create(empty, *pipeline, {.batch_size = 1, .num_threads = 1, .prefetch = 1, .collect_stats = false})
          .is_ok());
  auto normalized = Pipeline::create({CenterCrop{32, 32}, Normalize{}});
  EXPECT_FALSE(Loader::create(empty, *normalized, {.batch_size = 1}).is_ok());  // uint8 + Normalize
}

// A source that keeps shards in memory (a remote dataset's stream, say): it wants `per_shard` bytes a
// shard of two windows at least and of three at most, and records what a loader gives it.
class MemoryKeepingSource final : public Source {
 public:
  explicit MemoryKeepingSource(size_t per_shard) : per_shard_(per_shard) {}
  int64_t size() const override { return 8; }
  int64_t label(int64_t) const override { return 0; }
  std::string name(int64_t i) const override { return "kept://" + std::to_string(i); }
  Status read(int64_t, std::vector<uint8_t>& out) const override {
    out = testing::encode_jpeg(testing::synthetic_rgb(32, 32, 1), 32, 32);
    return Status::ok();
  }
  std::vector<int64_t> shard_sizes() const override { return {2, 2, 2, 2}; }
  SourceMemory memory_wanted(int64_t window) const override {
    return {.least = 2 * static_cast<uint64_t>(window) * per_shard_,
            .wanted = 3 * static_cast<uint64_t>(window) * per_shard_};
  }
  void set_memory(uint64_t bytes, int64_t window) const override {
    given = bytes;
    given_window = window;
  }
  mutable uint64_t given = 0;
  mutable int64_t given_window = -1;

 private:
  size_t per_shard_;
};

TEST(LoaderTest, ASourceKeepingShardsInMemoryTakesItsShareOfMaxMemoryFirst) {
  auto pipeline = Pipeline::create({CenterCrop{32, 32}});
  constexpr size_t kBuffer = 2 * (3072 + 8);  // batch 2 of 32 x 32 x 3 bytes and their labels
  constexpr size_t kShard = 10000;
  const LoaderOptions shards{
      .batch_size = 2, .max_memory = 3 * kBuffer + 100 * kShard, .order = SampleOrder::kShards, .shard_window = 2};
  // Room to spare: it gets what it wants (three windows), the ring and decodes the rest.
  auto source = std::make_shared<MemoryKeepingSource>(kShard);
  auto loader = Loader::create(source, *pipeline, shards);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  EXPECT_EQ(source->given, 6 * kShard);
  EXPECT_EQ(source->given_window, 2);
  // Little room: half of what prefetch 1's ring leaves, but never less than two windows.
  auto tight = std::make_shared<MemoryKeepingSource>(kShard);
  LoaderOptions o = shards;
  o.max_memory = 3 * kBuffer + 5 * kShard;
  ASSERT_TRUE(Loader::create(tight, *pipeline, o).is_ok());
  EXPECT_EQ(tight->given, 4 * kShard);
  // Too little: refused, saying what to change.
  o.max_memory = 3 * kBuffer + 4 * kShard - 1;
  auto refused = Loader::create(std::make_shared<MemoryKeepingSource>(kShard), *pipeline, o);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("lower shard_window or batch_size"), std::string::npos)
      << refused.status().message();
  // What it keeps is not the ring's: auto prefetch stays within what max_memory leaves.
  EXPECT_LE((*loader)->stats().ring_slots * (*loader)->stats().slot_bytes + source->given, shards.max_memory);
}

TEST(LoaderTest, MaxMemoryBoundsTheRingWhateverThePrefetch) {
  auto empty = std::make_shared<MemorySource>(std::vector<std::vector<uint8_t>>{}, kClasses);
  auto pipeline = Pipeline::create({CenterCrop{32, 32}});
  constexpr size_t kBuffer = 4 * (3072 + 8);  // batch 4 of 32 x 32 x 3 bytes and their labels
  // One buffer over max_memory (or any ring short of prefetch 1 + 2): refused with an explicit prefetch
  // too, naming both sizes, where it once ran with prefetch 1 and 3 buffers over the budget.
  for (int prefetch : {0, 1, 4}) {
    for (size_t max_memory : {kBuffer - 1, 3 * kBuffer - 1}) {
      auto refused =
          Loader::create(empty, *pipeline, {.batch_size = 4, .prefetch = prefetch, .max_memory = max_memory});
      ASSERT_FALSE(refused.is_ok()) << prefetch << " " << max_memory;
      EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
      const std::string& m = refused.status().message();
      EXPECT_NE(m.find("max_memory of 0.0 MiB (" + std::to_string(max_memory) + " bytes)"), std::string::npos) << m;
      EXPECT_NE(m.find("fewer than 3 batch buffers of 0.0 MiB"), std::string::npos) << m;
    }
  }
  // An explicit prefetch is lowered to what fits, and says so: the engine's own notice.
  auto lowered = Loader::create(empty, *pipeline, {.batch_size = 4, .prefetch = 4, .max_memory = 4 * kBuffer});
  ASSERT_TRUE(lowered.is_ok()) << lowered.status().to_string();
  EXPECT_EQ((*lowered)->prefetch(), 2);
  ASSERT_EQ((*lowered)->notices().size(), 1u);
  EXPECT_NE((*lowered)->notices()[0].find("prefetch=4 needs 0 MiB of batch buffers (4 + 2, of 0.0 MiB each)"),
            std::string::npos)
      << (*lowered)->notices()[0];
  EXPECT_NE((*lowered)->notices()[0].find("max_memory=" + std::to_string(4 * kBuffer) + " bytes"), std::string::npos);
  EXPECT_NE((*lowered)->notices()[0].find("using prefetch=2"), std::string::npos);
  EXPECT_LE((*lowered)->stats().ring_slots * (*lowered)->stats().slot_bytes, 4 * kBuffer);
  auto fits = Loader::create(empty, *pipeline, {.batch_size = 4, .prefetch = 2, .max_memory = 4 * kBuffer});
  ASSERT_TRUE(fits.is_ok());
  EXPECT_TRUE((*fits)->notices().empty());
  EXPECT_EQ((*fits)->prefetch(), 2);
  // A DeviceLoader's host batches in flight are buffers of the ring too: they count against max_memory.
  auto device =
      Loader::create(empty, *pipeline, {.batch_size = 4, .prefetch = 2, .max_memory = 4 * kBuffer, .extra_buffers = 1});
  ASSERT_TRUE(device.is_ok());
  EXPECT_EQ((*device)->prefetch(), 1);
  ASSERT_EQ((*device)->notices().size(), 1u);
  EXPECT_NE((*device)->notices()[0].find("(2 + 2 + 1 for copies to the device"), std::string::npos)
      << (*device)->notices()[0];
  auto no_room = Loader::create(empty, *pipeline, {.batch_size = 4, .max_memory = 4 * kBuffer, .extra_buffers = 2});
  ASSERT_FALSE(no_room.is_ok());
  EXPECT_NE(no_room.status().message().find("fewer than 5 batch buffers"), std::string::npos)
      << no_room.status().message();
}

TEST(LoaderTest, StatsCountEverySampleByteAndStage) {
  auto images = make_images(40);
  int64_t total_bytes = 0;
  for (const auto& im : images) total_bytes += static_cast<int64_t>(im.size());
  images[7] = {1, 2, 3};  // undecodable: counted, skipped, and its 3 bytes read
  total_bytes += 3 - static_cast<int64_t>(make_images(40)[7].size());
  auto source = std::make_shared<MemorySource>(images, kClasses);
  auto loader = make_loader(source, {RandomResizedCrop{24, 24}},
                            {.batch_size = 8, .num_threads = 2, .prefetch = 2, .on_error = ErrorPolicy::kSkip});
  run_epoch(*loader);
  LoaderStats s = loader->stats();
  EXPECT_EQ(s.samples, 40);
  EXPECT_EQ(s.samples_delivered, 39);
  EXPECT_EQ(s.batches, 5);
  EXPECT_EQ(s.next_calls, 5);
  EXPECT_EQ(s.errors_skipped, 1);
  EXPECT_EQ(s.stages.bytes_read, total_bytes);
  EXPECT_GT(s.stages.read_ns, 0);
  EXPECT_GT(s.stages.decode_ns, 0);
  EXPECT_GT(s.stages.transform_ns, 0);
  EXPECT_GT(s.worker_cpu_s, 0);
  EXPECT_GT(s.elapsed_s, 0);
  EXPECT_GE(s.wait_s, s.fill_wait_s);
  EXPECT_EQ(s.threads, 2);
  EXPECT_EQ(s.active_threads, 2);
  EXPECT_EQ(s.prefetch, 2);
  EXPECT_FALSE(s.auto_threads);
  EXPECT_GE(s.ring_slots, 4);
  // The consumer did nothing but wait: input-bound, and the verdict names a stage.
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.bound, "input") << v.summary;
  // Which limit depends on the machine's load (stats_test.cc tests each rule on fixed figures): a stage, or
  // "prefetch" (the fixed prefetch of 2 held idle workers back with cores to spare), or "cores" (another
  // process had them). Never "unknown": stage times were measured.
  EXPECT_TRUE(v.limit == "storage" || v.limit == "decode" || v.limit == "transform" || v.limit == "prefetch" ||
              v.limit == "cores")
      << v.limit;
  EXPECT_NE(v.summary.find("is the limit"), std::string::npos) << v.summary;

  loader->reset_stats();
  s = loader->stats();
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(s.batches, 0);
  EXPECT_EQ(s.errors_skipped, 0);
  EXPECT_EQ(s.stages.bytes_read, 0);
  EXPECT_EQ(diagnose(s).bound, "unknown");
  run_epoch(*loader, 1);
  EXPECT_EQ(loader->stats().samples, 40);
}

TEST(LoaderTest, AVerySlowConsumerIsConsumerBound) {
  auto source = std::make_shared<MemorySource>(make_images(24), kClasses);
  auto loader = make_loader(source, {CenterCrop{16, 16}}, {.batch_size = 4, .num_threads = 2, .prefetch = 2});
  ASSERT_TRUE(loader->start_epoch(0).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the prefetch window fill
  for (;;) {
    auto batch = loader->next();
    ASSERT_TRUE(batch.is_ok());
    if (!*batch) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the "training step"
  }
  const Verdict v = diagnose(loader->stats());
  EXPECT_EQ(v.bound, "consumer") << v.summary;
  EXPECT_EQ(v.limit, "");
}

// Runs epoch `epoch` from `start`, taking at most `max_batches` batches; returns the labels received and
// the position a resumed run would start from.
std::pair<std::vector<int64_t>, int64_t> partial_epoch(Loader& loader, uint64_t epoch, int64_t start, int max_batches) {
  std::vector<int64_t> labels;
  EXPECT_TRUE(loader.start_epoch(epoch, start).is_ok());
  for (int i = 0; i < max_batches; ++i) {
    auto b = loader.next();
    EXPECT_TRUE(b.is_ok());
    if (!b.is_ok() || !*b) break;
    for (int64_t j = 0; j < (*b)->size(); ++j) labels.push_back((*b)->labels()[j]);
  }
  return {labels, loader.position()};
}

TEST(LoaderTest, ResumeFromAnyPointContinuesExactly) {
  auto images = make_images(50);
  for (int64_t i : {7, 8, 23}) images[i].resize(images[i].size() / 3);  // skipped samples shift batches
  auto source = std::make_shared<MemorySource>(images, kClasses);
  const LoaderOptions opts{
      .batch_size = 4, .shuffle = true, .seed = 2, .num_threads = 3, .prefetch = 4, .on_error = ErrorPolicy::kSkip};
  auto reference = make_loader(source, {CenterCrop{32, 32}}, opts);
  const auto [all, end] = partial_epoch(*reference, 5, 0, 1000);
  EXPECT_EQ(end, 50);
  EXPECT_EQ(all.size(), 47u);
  for (int cut : {0, 1, 2, 5, 11}) {
    // The interrupted run has prefetched up to 4 batches past the cut when its state is taken.
    auto first = make_loader(source, {CenterCrop{32, 32}}, opts);
    auto [head, position] = partial_epoch(*first, 5, 0, cut);
    first.reset();
    LoaderOptions other = opts;
    other.num_threads = 1;  // resume with another thread count
    auto second = make_loader(source, {CenterCrop{32, 32}}, other);
    auto [tail, finish] = partial_epoch(*second, 5, position, 1000);
    head.insert(head.end(), tail.begin(), tail.end());
    EXPECT_EQ(head, all) << "cut after " << cut << " batches, position " << position;
    EXPECT_EQ(finish, 50);
  }
  EXPECT_FALSE(reference->start_epoch(5, 51).is_ok());
}

TEST(LoaderTest, ShardedRanksSplitTheEpoch) {
  auto source = std::make_shared<MemorySource>(make_images(23), kClasses);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto loader = make_loader(source, {CenterCrop{32, 32}},
                              {.batch_size = 2, .shuffle = true, .num_threads = 2, .shard = {rank, 3, true}});
    EXPECT_EQ(loader->num_batches(), 4);  // 7 samples each: the 2 left over are not visited this epoch
    const EpochRun run = run_epoch(*loader, 0);
    EXPECT_EQ(run.labels.size(), 7u);
    for (int64_t l : run.labels) EXPECT_TRUE(seen.insert(l).second);
  }
  EXPECT_EQ(seen.size(), 21u);
  auto pipeline = Pipeline::create({CenterCrop{32, 32}});
  EXPECT_FALSE(Loader::create(source, *pipeline, {.batch_size = 1, .shard = {3, 3, true}}).is_ok());
}

// ---- explicit epoch orders (chute.DataLoader's fast paths feed torch's samplers' indices) ----------------

struct Drained {
  std::vector<int64_t> labels, sizes;
  std::map<int64_t, std::vector<uint8_t>> pixels;
};

Drained drain(Loader& loader) {
  Drained d;
  const size_t sample_bytes = static_cast<size_t>(loader.out_height()) * loader.out_width() * 3;
  for (;;) {
    auto batch = loader.next();
    EXPECT_TRUE(batch.is_ok()) << batch.status().to_string();
    if (!batch.is_ok() || !*batch) return d;
    d.sizes.push_back((*batch)->size());
    for (int64_t i = 0; i < (*batch)->size(); ++i) {
      const auto* p = static_cast<const uint8_t*>((*batch)->images()) + i * sample_bytes;
      d.labels.push_back((*batch)->labels()[i]);
      d.pixels[(*batch)->labels()[i]].assign(p, p + sample_bytes);
    }
  }
}

TEST(LoaderTest, ExplicitOrderIsVisitedAsGivenWithRepeatsAndAShortLastBatch) {
  auto source = std::make_shared<MemorySource>(make_images(12), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 4, .shuffle = true, .num_threads = 3});
  const std::vector<int64_t> order = {11, 0, 0, 5, 3, 3, 3, 7, 2, 9};
  ASSERT_TRUE(loader->start_epoch(0, 0, order).is_ok());
  const Drained d = drain(*loader);
  EXPECT_EQ(d.labels, order);  // shuffle=true in the options is ignored: the order is the caller's
  EXPECT_EQ(d.sizes, (std::vector<int64_t>{4, 4, 2}));
  // Back to the options' own order afterwards.
  ASSERT_TRUE(loader->start_epoch(1).is_ok());
  const EpochOrder own(12, true, 0, 1);
  const Drained again = drain(*loader);
  ASSERT_EQ(again.labels.size(), 12u);
  for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(again.labels[k], own[k]);
}

TEST(LoaderTest, ExplicitOrderKeysAugmentationBySeedEpochAndIndex) {
  auto source = std::make_shared<MemorySource>(make_images(6, 64, 48), kClasses);
  std::vector<Transform> t{RandomResizedCrop{24, 24}, RandomHorizontalFlip{}};
  auto a = make_loader(source, t, {.batch_size = 3, .seed = 4, .num_threads = 2});
  auto b = make_loader(source, t, {.batch_size = 2, .seed = 4, .num_threads = 1});
  ASSERT_TRUE(a->start_epoch(7, 0, {0, 1, 2, 3, 4, 5}).is_ok());
  ASSERT_TRUE(b->start_epoch(7, 0, {5, 4, 3, 2, 1, 0}).is_ok());
  const Drained da = drain(*a), db = drain(*b);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(da.pixels.at(i), db.pixels.at(i)) << "sample " << i;
  ASSERT_TRUE(b->start_epoch(8, 0, {0, 1, 2, 3, 4, 5}).is_ok());
  EXPECT_NE(drain(*b).pixels, da.pixels);  // another epoch key: other crops
}

TEST(LoaderTest, ExplicitOrderSeedKeysTheEpochInPlaceOfTheOptionsSeed) {
  auto source = std::make_shared<MemorySource>(make_images(6, 64, 48), kClasses);
  std::vector<Transform> t{RandomResizedCrop{24, 24}, RandomHorizontalFlip{}};
  const std::vector<int64_t> order{0, 1, 2, 3, 4, 5};
  // A loader made with seed 9, and one made with seed 0 given seed 9 for the epoch: the same crops.
  auto own = make_loader(source, t, {.batch_size = 3, .seed = 9, .num_threads = 2});
  auto given = make_loader(source, t, {.batch_size = 3, .seed = 0, .num_threads = 2});
  ASSERT_TRUE(own->start_epoch(2, 0, order).is_ok());
  const Drained d_own = drain(*own);
  ASSERT_TRUE(given->start_epoch(2, 0, order, 9).is_ok());
  EXPECT_EQ(drain(*given).pixels, d_own.pixels);
  // All 64 bits of the seed count (a torch seed differs from another in its high half as often as not).
  const uint64_t low = 0x12345678, high = low | (uint64_t{1} << 40);
  ASSERT_TRUE(given->start_epoch(2, 0, order, low).is_ok());
  const Drained d_low = drain(*given);
  ASSERT_TRUE(given->start_epoch(2, 0, order, high).is_ok());
  EXPECT_NE(drain(*given).pixels, d_low.pixels);
  // And the epoch still counts beside it.
  ASSERT_TRUE(given->start_epoch(3, 0, order, low).is_ok());
  EXPECT_NE(drain(*given).pixels, d_low.pixels);
}

TEST(LoaderTest, ExplicitOrderRejectsIndicesOutsideTheSourceAndEmptyOrderEndsAtOnce) {
  auto source = std::make_shared<MemorySource>(make_images(5), kClasses);
  auto loader = make_loader(source, {CenterCrop{32, 32}}, {.batch_size = 2, .num_threads = 1});
  Status st = loader->start_epoch(0, 0, {1, 5});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("index 5 (position 1"), std::string::npos) << st.message();
  EXPECT_EQ(loader->start_epoch(0, 0, {-1}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(loader->start_epoch(0, 0, {}).is_ok());
  EXPECT_TRUE(drain(*loader).labels.empty());
}

TEST(LoaderTest, RejectsAReducingGapPillowWouldRefuse) {
  auto source = std::make_shared<MemorySource>(make_images(2), kClasses);
  for (double gap : {0.99, 0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    LoaderOptions options{.batch_size = 1, .num_threads = 1};
    options.decode.mode = DecodeMode::kReduced;
    options.decode.reducing_gap = gap;
    auto loader = Loader::create(source, *Pipeline::create({Resize{8}, CenterCrop{8, 8}}), options);
    ASSERT_FALSE(loader.is_ok()) << gap;
    EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(loader.status().message().find("reducing_gap must be a finite number >= 1.0"), std::string::npos);
  }
  LoaderOptions options{.batch_size = 1, .num_threads = 1};
  options.decode.reducing_gap = 1.0;  // Pillow's smallest
  EXPECT_TRUE(Loader::create(source, *Pipeline::create({Resize{8}, CenterCrop{8, 8}}), options).is_ok());
}

}  // namespace
}  // namespace chute
