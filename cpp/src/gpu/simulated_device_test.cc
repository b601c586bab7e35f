#include "chute/gpu/simulated_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace chute {
namespace {

TEST(SimulatedDeviceTest, CopiesCompleteInOrderAndEventsSayWhen) {
  auto dev = SimulatedDevice::create(/*seed=*/1, /*max_delay_us=*/2000).value();
  constexpr size_t n = 1 << 16;
  auto src = dev->allocate_host(n);
  auto dst = dev->allocate_device(n);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  std::memset(*src, 42, n);
  auto ev = dev->create_event();
  ASSERT_TRUE(ev.is_ok());
  EXPECT_TRUE(*dev->query(**ev));  // never recorded: complete, as in CUDA
  ASSERT_TRUE(dev->copy_async(*dst, *src, n).is_ok());
  ASSERT_TRUE(dev->record_transfer(**ev).is_ok());
  ASSERT_TRUE(dev->synchronize(**ev).is_ok());
  EXPECT_TRUE(*dev->query(**ev));
  EXPECT_EQ(static_cast<uint8_t*>(*dst)[n - 1], 42);
  EXPECT_EQ(dev->copies(), 1);
  dev->free_host(*src, n);
  dev->free_device(*dst, n);
  EXPECT_EQ(dev->violations(), 0) << dev->first_violation();
  EXPECT_EQ(dev->live_host_bytes(), 0u);
  EXPECT_EQ(dev->live_device_bytes(), 0u);
}

// The checks the delivery tests rely on must be able to fail.
TEST(SimulatedDeviceTest, DetectsASourceReusedBeforeItsCopyCompleted) {
  // 10-20 ms before the copy reads: the overwrite lands first, ordered before the read by the device's
  // lock (so TSan sees no data race: the breach is one of protocol, which only the hash check can see).
  auto dev = SimulatedDevice::create(2, 20000, 10000).value();
  constexpr size_t n = 4096;
  void* src = *dev->allocate_host(n);
  void* dst = *dev->allocate_device(n);
  auto ev = std::move(*dev->create_event());
  std::memset(src, 1, n);
  ASSERT_TRUE(dev->copy_async(dst, src, n).is_ok());
  ASSERT_TRUE(dev->record_transfer(*ev).is_ok());
  std::memset(src, 2, n);  // the protocol breach: reused before `ev` completed
  ASSERT_TRUE(dev->synchronize(*ev).is_ok());
  EXPECT_GE(dev->violations(), 1);
  EXPECT_NE(dev->first_violation().find("changed while its copy"), std::string::npos) << dev->first_violation();
  dev->free_host(src, n);
  dev->free_device(dst, n);
}

TEST(SimulatedDeviceTest, RejectsPageableSourcesAndForeignFrees) {
  auto dev = SimulatedDevice::create(3, 0).value();
  constexpr size_t n = 256;
  std::vector<uint8_t> pageable(n);
  void* dst = *dev->allocate_device(n);
  EXPECT_FALSE(dev->copy_async(dst, pageable.data(), n).is_ok());
  void* src = *dev->allocate_host(n);
  EXPECT_FALSE(dev->copy_async(dst, src, n + 1).is_ok());  // past the end of the allocation
  dev->free_host(src, n);
  dev->free_host(src, n);  // twice
  dev->free_device(dst, n);
  EXPECT_EQ(dev->violations(), 3);
}

TEST(SimulatedDeviceTest, TransferWaitHoldsCopiesUntilTheConsumerReleased) {
  auto dev = SimulatedDevice::create(4, 100).value();
  constexpr size_t n = 1024;
  void* src = *dev->allocate_host(n);
  void* dst = *dev->allocate_device(n);
  auto released = std::move(*dev->create_event());
  auto copied = std::move(*dev->create_event());
  ASSERT_TRUE(dev->record_consumer(*released, 0).is_ok());  // the host consumer: complete at once
  EXPECT_TRUE(*dev->query(*released));
  ASSERT_TRUE(dev->transfer_wait(*released).is_ok());
  std::memset(src, 9, n);
  ASSERT_TRUE(dev->copy_async(dst, src, n).is_ok());
  ASSERT_TRUE(dev->record_transfer(*copied).is_ok());
  ASSERT_TRUE(dev->consumer_wait(0, *copied).is_ok());  // blocks the host until the copy completed
  EXPECT_EQ(static_cast<uint8_t*>(dst)[0], 9);
  dev->free_host(src, n);
  dev->free_device(dst, n);
  EXPECT_EQ(dev->violations(), 0) << dev->first_violation();
}

// The destructor runs the queued copies (never reading freed memory: run under ASan/TSan) before it
// frees what the caller left allocated.
TEST(SimulatedDeviceTest, DestructionDrainsQueuedCopies) {
  constexpr size_t n = 1 << 12;
  auto dev = SimulatedDevice::create(5, 1000, 500).value();  // each copy takes at least 1 ms
  void* src = *dev->allocate_host(n);
  void* dst = *dev->allocate_device(n);
  std::memset(src, 7, n);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(dev->copy_async(dst, src, n).is_ok());
  const auto start = std::chrono::steady_clock::now();
  dev.reset();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(7));  // it waited for them
}

}  // namespace
}  // namespace chute
