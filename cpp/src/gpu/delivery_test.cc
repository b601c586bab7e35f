// The slot-reuse protocol of DeviceLoader under heavy reuse, on the simulated device, which checks as it
// runs that no host buffer changes while its copy is in flight and that nothing is copied from or into
// freed memory. The consumer checks every device batch's bytes when it receives it and again when it
// releases it, so a device slot overwritten while held shows too. Every test runs under a watchdog: a
// deadlock fails the run instead of hanging it.
#include "chute/gpu/delivery.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "chute/gpu/simulated_device.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::MemorySource;

constexpr int kW = 32, kH = 24, kBatch = 4;
constexpr size_t kSampleBytes = size_t{kW} * kH * 3;

// Runs `body` on its own thread; a run longer than `limit` is a deadlock: report it and abort.
void within(std::chrono::seconds limit, const std::function<void()>& body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(limit) == std::future_status::timeout) {
    ADD_FAILURE() << "no result after " << limit.count() << " s: deadlock";
    std::fprintf(stderr, "delivery_test: deadlock, aborting\n");
    std::abort();
  }
  done.get();
}

std::shared_ptr<const Source> make_source(int n, std::set<int64_t> truncated = {}) {
  std::vector<std::vector<uint8_t>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(testing::encode_jpeg(testing::synthetic_rgb(kW, kH, i), kW, kH));
    if (truncated.count(i)) items.back().resize(items.back().size() / 2);
  }
  return std::make_shared<MemorySource>(std::move(items), 1 << 30);  // label == index
}

LoaderOptions base_options() {
  LoaderOptions o;
  o.batch_size = kBatch;
  o.shuffle = true;
  o.seed = 7;
  o.num_threads = 2;
  o.prefetch = 2;
  return o;
}

std::shared_ptr<Loader> make_loader(std::shared_ptr<const Source> source, LoaderOptions o) {
  auto pipeline = Pipeline::create({CenterCrop{kH, kW}});
  auto loader = Loader::create(std::move(source), std::move(*pipeline), o);
  EXPECT_TRUE(loader.is_ok()) << loader.status().to_string();
  return std::shared_ptr<Loader>(std::move(*loader));
}

struct Expected {
  std::vector<int64_t> labels;
  std::vector<uint8_t> bytes;
};

// What the plain host loader delivers for an epoch: the reference.
std::vector<Expected> host_epoch(std::shared_ptr<const Source> source, uint64_t epoch,
                                 LoaderOptions o = base_options()) {
  auto loader = make_loader(std::move(source), o);
  EXPECT_TRUE(loader->start_epoch(epoch).is_ok());
  std::vector<Expected> out;
  for (;;) {
    auto b = loader->next();
    if (!b.is_ok() || *b == nullptr) break;
    Expected e;
    e.labels.assign((*b)->labels(), (*b)->labels() + (*b)->size());
    const auto* p = static_cast<const uint8_t*>((*b)->images());
    e.bytes.assign(p, p + (*b)->size() * kSampleBytes);
    out.push_back(std::move(e));
  }
  return out;
}

struct Rig {
  std::shared_ptr<SimulatedDevice> device;
  std::unique_ptr<DeviceLoader> loader;
};

Rig make_rig(std::shared_ptr<const Source> source, int device_prefetch, int max_delay_us, uint64_t seed = 1,
             LoaderOptions o = base_options()) {
  Rig r;
  r.device = SimulatedDevice::create(seed, max_delay_us).value();
  DeliveryOptions d{.device_prefetch = device_prefetch};
  DeviceLoader::prepare(o, *r.device, d);
  auto dl = DeviceLoader::create(r.device, make_loader(std::move(source), o), d);
  EXPECT_TRUE(dl.is_ok()) << dl.status().to_string();
  r.loader = std::move(*dl);
  return r;
}

bool matches(const DeviceBatch& b, const Expected& e) {
  if (b.size() != static_cast<int64_t>(e.labels.size())) return false;
  return std::memcmp(b.labels(), e.labels.data(), e.labels.size() * sizeof(int64_t)) == 0 &&
         std::memcmp(b.images(), e.bytes.data(), e.bytes.size()) == 0;
}

void expect_clean(const Rig& r) { EXPECT_EQ(r.device->violations(), 0) << r.device->first_violation(); }

// A slow consumer that keeps each batch a while, releases some on other threads, and checks each batch
// when received and again when released; rings of 2 and 3 device slots cycle many times per epoch.
TEST(DeliveryTest, HeavyReuseDeliversTheHostBatchesUnchanged) {
  auto source = make_source(64);
  for (int prefetch : {1, 2}) {
    within(std::chrono::seconds(120), [&] {
      Rig r = make_rig(source, prefetch, /*max_delay_us=*/400, prefetch);
      EXPECT_EQ(r.loader->num_slots(), prefetch + 1);
      std::mt19937 rng(prefetch);
      for (uint64_t epoch = 0; epoch < 3; ++epoch) {
        const auto expected = host_epoch(source, epoch);
        ASSERT_TRUE(r.loader->start_epoch(epoch).is_ok());
        std::vector<std::thread> releasers;
        size_t i = 0;
        int64_t samples = 0;
        for (;; ++i) {
          auto b = r.loader->next(/*consumer=*/0);
          ASSERT_TRUE(b.is_ok()) << b.status().to_string();
          if (*b == nullptr) break;
          ASSERT_LT(i, expected.size());
          EXPECT_TRUE(matches(**b, expected[i])) << "batch " << i << " of epoch " << epoch << " on arrival";
          samples += (*b)->size();
          EXPECT_EQ(r.loader->position(), samples);  // the consumer's, not the prefetched
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1500));
          EXPECT_TRUE(matches(**b, expected[i])) << "batch " << i << " of epoch " << epoch << " overwritten while held";
          if (i % 3 == 0) {
            // At most one batch is held by a releaser when next() runs again: a releaser the scheduler left
            // waiting for 3 batches would hold a second device buffer of the 2 and fail the test, not the code.
            for (auto& t : releasers) t.join();
            releasers.clear();
            releasers.emplace_back(
                [batch = std::move(*b)] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
          }
        }
        for (auto& t : releasers) t.join();
        EXPECT_EQ(i, expected.size());
      }
      expect_clean(r);
      auto device = r.device;
      r.loader.reset();
      EXPECT_EQ(device->live_device_bytes(), 0u);
      EXPECT_EQ(device->live_host_bytes(), 0u);  // every pinned ring buffer returned
    });
  }
}

TEST(DeliveryTest, EarlyBreakRestartAndCloseWithCopiesInFlight) {
  auto source = make_source(40);
  within(std::chrono::seconds(60), [&] {
    Rig r = make_rig(source, 2, /*max_delay_us=*/20000);  // copies of up to 40 ms: always in flight
    ASSERT_TRUE(r.loader->start_epoch(0).is_ok());
    auto first = r.loader->next(0);
    ASSERT_TRUE(first.is_ok() && *first);
    const auto expected0 = host_epoch(source, 0);
    EXPECT_TRUE(matches(**first, expected0[0]));
    // break: restart while copies are in flight and a batch is held.
    ASSERT_TRUE(r.loader->start_epoch(1).is_ok());
    const auto expected1 = host_epoch(source, 1);
    auto b = r.loader->next(0);
    ASSERT_TRUE(b.is_ok() && *b);
    EXPECT_TRUE(matches(**b, expected1[0]));
    b = r.loader->next(0);  // its copy is issued, and the next ones
    ASSERT_TRUE(b.is_ok() && *b);
    r.loader->close();                            // with copies in flight
    EXPECT_TRUE(matches(**first, expected0[0]));  // held batches stay valid after close
    EXPECT_TRUE(matches(**b, expected1[1]));
    EXPECT_EQ(r.loader->next(0).status().code(), StatusCode::kCancelled);
    EXPECT_EQ(r.loader->start_epoch(2).code(), StatusCode::kCancelled);
    auto device = r.device;
    r.loader.reset();
    EXPECT_TRUE(matches(**first, expected0[0]));  // and after the loader is gone
    EXPECT_GT(device->live_device_bytes(), 0u);
    first->reset();
    b->reset();
    EXPECT_EQ(device->live_device_bytes(), 0u);
    EXPECT_EQ(device->live_host_bytes(), 0u);
    EXPECT_EQ(device->violations(), 0) << device->first_violation();
  });
}

TEST(DeliveryTest, ConsumerExceptionMidEpochLeavesNothingBehind) {
  auto source = make_source(32);
  within(std::chrono::seconds(60), [&] {
    Rig r = make_rig(source, 1, 3000);
    ASSERT_TRUE(r.loader->start_epoch(0).is_ok());
    try {
      auto b = r.loader->next(0);
      auto c = r.loader->next(0);
      ASSERT_TRUE(b.is_ok() && c.is_ok());
      throw std::runtime_error("training step failed");
    } catch (const std::runtime_error&) {
    }
    // The same loader goes on with a new epoch, and every batch of it is right.
    const auto expected = host_epoch(source, 5);
    ASSERT_TRUE(r.loader->start_epoch(5).is_ok());
    for (const Expected& e : expected) {
      auto b = r.loader->next(0);
      ASSERT_TRUE(b.is_ok() && *b);
      EXPECT_TRUE(matches(**b, e));
    }
    auto end = r.loader->next(0);
    ASSERT_TRUE(end.is_ok());
    EXPECT_EQ(*end, nullptr);
    expect_clean(r);
  });
}

// kRaise: every batch before the bad sample's batch arrives, then its error; copies prefetched past it
// are not delivered.
TEST(DeliveryTest, SampleErrorsArriveAfterTheBatchesBeforeThemAndTheEpochGoesOn) {
  auto source = make_source(40, /*truncated=*/{21});
  LoaderOptions o = base_options();
  o.shuffle = false;
  within(std::chrono::seconds(60), [&] {
    Rig r = make_rig(source, 2, 500, 1, o);
    ASSERT_TRUE(r.loader->start_epoch(0).is_ok());
    int delivered = 0;
    Status error;
    for (;;) {
      auto b = r.loader->next(0);
      if (!b.is_ok()) {
        error = b.status();
        break;
      }
      ASSERT_NE(*b, nullptr) << "the epoch ended without the error";
      EXPECT_EQ((*b)->labels()[0], delivered * kBatch);
      ++delivered;
    }
    EXPECT_EQ(delivered, 21 / kBatch);
    EXPECT_EQ(error.code(), StatusCode::kCorruptData) << error.to_string();
    EXPECT_NE(error.message().find("mem://21"), std::string::npos) << error.message();
    // As torch's DataLoader: the error took its batch's place, and the epoch goes on with the next batch.
    auto after = r.loader->next(0);
    ASSERT_TRUE(after.is_ok() && *after) << after.status().to_string();
    EXPECT_EQ((*after)->labels()[0], (21 / kBatch + 1) * kBatch);
    after->reset();
    ASSERT_TRUE(r.loader->start_epoch(1).is_ok());  // and the loader still works
    auto b = r.loader->next(0);
    EXPECT_TRUE(b.is_ok() && *b);
    expect_clean(r);
  });
}

TEST(DeliveryTest, HoldingEveryDeviceBatchIsAnErrorNotAHang) {
  auto source = make_source(40);
  within(std::chrono::seconds(60), [&] {
    Rig r = make_rig(source, 1, 200);  // 2 device slots
    ASSERT_TRUE(r.loader->start_epoch(0).is_ok());
    std::vector<std::shared_ptr<DeviceBatch>> kept;
    Status st;
    for (int i = 0; i < 10; ++i) {
      auto b = r.loader->next(0);
      if (!b.is_ok()) {
        st = b.status();
        break;
      }
      kept.push_back(std::move(*b));
    }
    EXPECT_EQ(kept.size(), 2u);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(st.message().find("held by batches the consumer still references"), std::string::npos);
    kept.clear();
    const auto expected = host_epoch(source, 0);
    ASSERT_TRUE(r.loader->start_epoch(0).is_ok());
    for (const Expected& e : expected) {
      auto b = r.loader->next(0);
      ASSERT_TRUE(b.is_ok() && *b) << (b.is_ok() ? "end" : b.status().to_string());
      EXPECT_TRUE(matches(**b, e));
    }
    expect_clean(r);
  });
}

TEST(DeliveryTest, RejectsPageableLoadersAndBudgetsBelowTwoBatches) {
  auto device = SimulatedDevice::create(1, 0).value();
  auto source = make_source(8);
  auto plain = DeviceLoader::create(device, make_loader(source, base_options()));
  EXPECT_EQ(plain.status().code(), StatusCode::kInvalidArgument);
  LoaderOptions o = base_options();
  DeliveryOptions d{.device_prefetch = 2, .max_device_memory = kBatch * kSampleBytes};
  DeviceLoader::prepare(o, *device, d);
  auto small = DeviceLoader::create(device, make_loader(source, o), d);
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("max_device_memory"), std::string::npos);
  d = {.device_prefetch = 0};
  EXPECT_EQ(DeviceLoader::create(device, make_loader(source, o), d).status().code(), StatusCode::kInvalidArgument);
  // A budget for 2 slots of 4 caps the ring at 2 (prefetch 1).
  d = {.device_prefetch = 3, .max_device_memory = 2 * (kBatch * kSampleBytes + 256 + kBatch * 8)};
  auto capped = DeviceLoader::create(device, make_loader(source, o), d);
  ASSERT_TRUE(capped.is_ok()) << capped.status().to_string();
  EXPECT_EQ((*capped)->num_slots(), 2);
}

}  // namespace
}  // namespace chute
