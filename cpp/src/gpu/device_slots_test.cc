// DeviceSlots fed with host batches from outside a Loader (chute.ray's object-store buffers), on the
// simulated device, which checks that no source changes or goes while its copy is in flight. Sources
// are either registered host memory (copied from directly, split where registered ranges meet) or
// pageable memory (staged through the slot's pinned buffer). Each source's owner overwrites it when it is
// released, as Ray's object store reuses a freed object's memory: a release before the copy completed
// shows as a violation.
#include "chute/gpu/device_slots.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "chute/gpu/simulated_device.h"

namespace chute {
namespace {

constexpr size_t kSampleBytes = 300;
constexpr int64_t kBatch = 4;

// A batch's bytes: sample bytes then labels, a function of its number.
std::vector<uint8_t> batch_bytes(int64_t n, int count) {
  std::vector<uint8_t> out(count * kSampleBytes);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(n * 131 + i * 7);
  return out;
}

std::vector<int64_t> batch_labels(int64_t n, int count) {
  std::vector<int64_t> out(count);
  std::iota(out.begin(), out.end(), n * 100);
  return out;
}

// An owner that scribbles over the source when it goes (the object store reusing the memory).
std::shared_ptr<const void> scribbling_owner(void* p, size_t bytes) {
  return std::shared_ptr<const void>(p, [bytes](const void* q) { std::memset(const_cast<void*>(q), 0x5A, bytes); });
}

void expect_batch(const DeviceBatch& b, int64_t n, int count) {
  ASSERT_EQ(b.size(), count);
  const auto bytes = batch_bytes(n, count);
  const auto labels = batch_labels(n, count);
  EXPECT_EQ(std::memcmp(b.images(), bytes.data(), bytes.size()), 0) << "batch " << n;
  EXPECT_EQ(std::memcmp(b.labels(), labels.data(), labels.size() * sizeof(int64_t)), 0) << "batch " << n;
}

TEST(DeviceSlotsTest, RegisteredSourcesAreCopiedDirectlyAndHeldUntilTheirCopyCompletes) {
  auto device = SimulatedDevice::create(3, 300).value();
  auto slots = DeviceSlots::create(device, kSampleBytes, kBatch, {.device_prefetch = 2}).value();
  // An "object store": two adjacent registered ranges; batches are placed so that some straddle them.
  const size_t batch_span = kBatch * kSampleBytes + kBatch * sizeof(int64_t);
  const size_t stride = batch_span + 64;  // room for a batch at offset 0 or 61
  std::vector<uint8_t> store(16 * stride);
  const size_t half = store.size() / 2 + 123;
  ASSERT_TRUE(slots->register_host(store.data(), half).is_ok());
  ASSERT_TRUE(slots->register_host(store.data() + half, store.size() - half).is_ok());
  EXPECT_FALSE(slots->register_host(store.data() + 10, 20).is_ok());  // overlaps: refused, as CUDA does
  EXPECT_TRUE(slots->registered(store.data() + half - 5, 10));
  const int64_t kBatches = 40;
  int64_t taken = 0;
  for (int64_t n = 0; n < kBatches || slots->waiting() > 0;) {
    while (n < kBatches && slots->can_issue()) {
      const int count = n == kBatches - 1 ? 3 : kBatch;  // a short last batch
      // Round-robin places in the store, reused 15 batches later: at most 3 (the slots) are in flight.
      uint8_t* at = store.data() + (n % 15) * stride + (n % 2 ? 61 : 0);
      const auto bytes = batch_bytes(n, count);
      const auto labels = batch_labels(n, count);
      std::memcpy(at, bytes.data(), bytes.size());
      std::memcpy(at + bytes.size(), labels.data(), labels.size() * sizeof(int64_t));
      const auto* label_at = reinterpret_cast<const int64_t*>(at + bytes.size());
      const Status st = slots->issue({at, label_at, count, scribbling_owner(at, batch_span), false, n});
      ASSERT_TRUE(st.is_ok()) << st.to_string() << " batch " << n << " at " << (at - store.data()) << " half " << half;
      ++n;
    }
    slots->reap();
    auto got = slots->take(0);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->second, taken);
    expect_batch(*got->first, taken, taken == kBatches - 1 ? 3 : kBatch);
    ++taken;
  }
  EXPECT_EQ(taken, kBatches);
  slots->close();
  EXPECT_EQ(device->violations(), 0) << device->first_violation();
  EXPECT_EQ(device->live_host_bytes(), 0u);  // every range registered, none allocated: no staging
}

TEST(DeviceSlotsTest, PageableSourcesGoThroughPinnedStagingAndMayChangeAtOnce) {
  auto device = SimulatedDevice::create(5, 300).value();
  auto slots = DeviceSlots::create(device, kSampleBytes, kBatch, {.device_prefetch = 3}).value();
  std::vector<uint8_t> bytes;
  std::vector<int64_t> labels;
  std::vector<std::shared_ptr<DeviceBatch>> held;
  for (int64_t n = 0; n < 30; ++n) {
    bytes = batch_bytes(n, kBatch);
    labels = batch_labels(n, kBatch);
    ASSERT_TRUE(slots->issue({bytes.data(), labels.data(), kBatch, nullptr, false, n}).is_ok());
    std::fill(bytes.begin(), bytes.end(), 0);  // the source changes right away: it was staged
    std::fill(labels.begin(), labels.end(), -1);
    auto got = slots->take(0);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    expect_batch(*got->first, n, kBatch);
    held.push_back(got->first);
    if (held.size() > 2) held.erase(held.begin());  // the consumer keeps the last two
  }
  held.clear();
  slots->close();
  EXPECT_EQ(device->violations(), 0) << device->first_violation();
  EXPECT_EQ(device->live_device_bytes(), 0u);
}

TEST(DeviceSlotsTest, HoldingEverySlotIsAnErrorAndCloseUnregisters) {
  auto device = SimulatedDevice::create(7, 50).value();
  auto slots = DeviceSlots::create(device, kSampleBytes, kBatch, {.device_prefetch = 1}).value();
  ASSERT_EQ(slots->num_slots(), 2);
  std::vector<uint8_t> store(4096);
  ASSERT_TRUE(slots->register_host(store.data(), store.size()).is_ok());
  const auto* labels = reinterpret_cast<const int64_t*>(store.data() + 2048);
  std::vector<std::shared_ptr<DeviceBatch>> held;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(slots->issue({store.data(), labels, kBatch, nullptr, false, i}).is_ok());
    held.push_back(slots->take(0)->first);
  }
  EXPECT_FALSE(slots->can_issue());
  const Status full = slots->issue({store.data(), labels, kBatch, nullptr, false, 2});
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("held by batches the consumer still references"), std::string::npos);
  EXPECT_EQ(slots->issue({store.data(), labels, kBatch + 1, nullptr, false, 2}).code(), StatusCode::kInvalidArgument);
  slots->close();
  // Unregistered at close: registering the same range on the device again works.
  EXPECT_TRUE(device->register_host(store.data(), store.size()).is_ok());
  device->unregister_host(store.data(), store.size());
  held.clear();  // released after close: the memory goes with the ring
  EXPECT_EQ(device->violations(), 0) << device->first_violation();
}

// Ray's object store on the trainer is shared memory that Ray maps and unmaps: a fallback allocation
// goes when its object is released, the whole store at ray.shutdown(). A registered window whose memory
// was replaced must not be copied from (CUDA would read the pages pinned at registration): DeviceSlots
// checks the mapping before each copy, unregisters the stale window and stages the batch.
TEST(DeviceSlotsTest, AWindowUnmappedAndRemappedIsNeverCopiedFromItsOldPages) {
  auto device = SimulatedDevice::create(11, 100).value();
  auto slots = DeviceSlots::create(device, kSampleBytes, kBatch, {.device_prefetch = 2}).value();
  constexpr size_t kWindow = 1 << 20;
  const int first = memfd_create("chute-test-store", MFD_CLOEXEC);
  const int second = memfd_create("chute-test-fallback", MFD_CLOEXEC);
  ASSERT_TRUE(first >= 0 && second >= 0 && ftruncate(first, kWindow) == 0 && ftruncate(second, kWindow) == 0);
  auto* store = static_cast<uint8_t*>(mmap(nullptr, kWindow, PROT_READ | PROT_WRITE, MAP_SHARED, first, 0));
  ASSERT_NE(store, MAP_FAILED);
  auto copy_through = [&](int64_t n) {
    const auto bytes = batch_bytes(n, kBatch);
    const auto labels = batch_labels(n, kBatch);
    std::memcpy(store, bytes.data(), bytes.size());
    std::memcpy(store + 4096, labels.data(), labels.size() * sizeof(int64_t));
    const auto* label_at = reinterpret_cast<const int64_t*>(store + 4096);
    ASSERT_TRUE(slots->issue({store, label_at, kBatch, nullptr, false, n}).is_ok());
    auto got = slots->take(0);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    expect_batch(*got->first, n, kBatch);
  };
  ASSERT_TRUE(slots->register_host(store, kWindow).is_ok());
  copy_through(0);
  EXPECT_EQ(slots->stale_ranges(), 0);

  // Unmapped without a word, and other memory mapped at the same address.
  ASSERT_EQ(mmap(store, kWindow, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, second, 0), store);
  copy_through(1);
  EXPECT_EQ(device->violations(), 0) << device->first_violation();
  EXPECT_EQ(slots->stale_ranges(), 1);
  EXPECT_FALSE(slots->registered(store, kWindow));  // staged from now on
  EXPECT_EQ(device->outlived_registrations(), 1);   // unmapped behind chute's back: it could only clean up

  // The new memory can be registered; unregistered before it is unmapped, its registration ends with it.
  ASSERT_TRUE(slots->register_host(store, kWindow).is_ok());
  copy_through(2);
  slots->unregister_host(store, kWindow);
  EXPECT_FALSE(slots->registered(store, kWindow));
  ASSERT_EQ(munmap(store, kWindow), 0);
  close(first), close(second);
  slots->close();
  EXPECT_EQ(device->violations(), 0) << device->first_violation();
  EXPECT_EQ(device->outlived_registrations(), 1);
  EXPECT_EQ(slots->stale_ranges(), 1);
}

}  // namespace
}  // namespace chute
