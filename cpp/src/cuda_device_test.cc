// The CUDA backend. Without libcudart or a GPU (CI, the development machine) it checks the clean failure;
// with one it runs real copies through the delivery protocol. Tests that need a GPU are skipped, not
// passed, where there is none.
#include "chute/cuda_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "chute/delivery.h"
#include "detail/cudart_api.h"
#include "test_util.h"

namespace chute {
namespace {

TEST(CudaDeviceTest, WithoutAGpuOpeningFailsWithAClearError) {
  const CudaAvailability a = cuda_availability();
  if (a.available) GTEST_SKIP() << "a CUDA GPU is present: " << a.message;
  EXPECT_FALSE(a.message.empty());
  auto dev = open_cuda_device(0);
  ASSERT_FALSE(dev.is_ok());
  EXPECT_EQ(dev.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(dev.status().message().find("device='cuda' needs libcudart / a CUDA GPU: "), std::string::npos)
      << dev.status().message();
  EXPECT_NE(dev.status().message().find(a.message), std::string::npos);
  EXPECT_TRUE(cuda_pci_bus_id(0).empty());
}

TEST(CudaDeviceTest, AMissingRuntimeLibraryIsReportedNotFatal) {
  const detail::LoadedCudart l = detail::load_cudart({"/nonexistent/libcudart.so.12", "libchute-no-such-cudart.so"});
  EXPECT_FALSE(l.ok);
  EXPECT_NE(l.why.find("/nonexistent/libcudart.so.12"), std::string::npos) << l.why;
  EXPECT_NE(l.why.find("libchute-no-such-cudart.so"), std::string::npos) << l.why;
  // A library without the runtime's symbols: named, not a crash.
  const detail::LoadedCudart wrong = detail::load_cudart({"libm.so.6"});
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.why.find("libcudart has no cudaGetErrorString"), std::string::npos) << wrong.why;
}

class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaAvailability a = cuda_availability();
    if (!a.available) GTEST_SKIP() << "no CUDA GPU: " << a.message;
    auto d = open_cuda_device(0);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    device_ = *d;
  }
  std::shared_ptr<Device> device_;
};

TEST_F(CudaGpuTest, CopiesRoundTripThroughTheTransferStream) {
  const detail::CudartApi* api = detail::cudart();
  constexpr size_t n = 8 << 20;
  void* host = *device_->allocate_host(n);
  void* dev = *device_->allocate_device(n);
  for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(host)[i] = static_cast<uint8_t>(i * 31 + 7);
  auto ev = std::move(*device_->create_event());
  ASSERT_TRUE(device_->copy_async(dev, host, n).is_ok());
  ASSERT_TRUE(device_->record_transfer(*ev).is_ok());
  ASSERT_TRUE(device_->consumer_wait(0, *ev).is_ok());  // the legacy default stream waits for it
  std::vector<uint8_t> back(n);
  ASSERT_EQ(api->cudaMemcpy(back.data(), dev, n, detail::cudaMemcpyDeviceToHost), detail::cudaSuccess);
  EXPECT_TRUE(*device_->query(*ev));
  EXPECT_EQ(std::memcmp(back.data(), host, n), 0);
  ev.reset();
  device_->free_device(dev, n);
  device_->free_host(host, n);
  EXPECT_NE(cuda_pci_bus_id(0), "");
}

TEST_F(CudaGpuTest, DeviceLoaderDeliversTheHostBatches) {
  const detail::CudartApi* api = detail::cudart();
  constexpr int kW = 64, kH = 48, kN = 64, kB = 8;
  std::vector<std::vector<uint8_t>> items;
  for (int i = 0; i < kN; ++i) items.push_back(testing::encode_jpeg(testing::synthetic_rgb(kW, kH, i), kW, kH));
  auto source = std::make_shared<testing::MemorySource>(std::move(items), 1 << 30);
  LoaderOptions o;
  o.batch_size = kB;
  o.num_threads = 2;
  o.prefetch = 2;
  auto host = std::shared_ptr<Loader>(std::move(*Loader::create(source, std::move(*Pipeline::create({CenterCrop{kH, kW}})), o)));
  DeliveryOptions d{.device_prefetch = 2};
  DeviceLoader::prepare(o, *device_, d);
  auto dl = DeviceLoader::create(device_, std::shared_ptr<Loader>(std::move(*Loader::create(source, std::move(*Pipeline::create({CenterCrop{kH, kW}})), o))), d);
  ASSERT_TRUE(dl.is_ok()) << dl.status().to_string();
  ASSERT_TRUE(host->start_epoch(0).is_ok());
  ASSERT_TRUE((*dl)->start_epoch(0).is_ok());
  const size_t bytes = size_t{kB} * kW * kH * 3;
  std::vector<uint8_t> back(bytes);
  for (int i = 0; i < kN / kB; ++i) {
    auto h = host->next();
    auto g = (*dl)->next(0);
    ASSERT_TRUE(h.is_ok() && *h && g.is_ok() && *g);
    ASSERT_EQ(api->cudaMemcpy(back.data(), (*g)->images(), bytes, detail::cudaMemcpyDeviceToHost), detail::cudaSuccess);
    EXPECT_EQ(std::memcmp(back.data(), (*h)->images(), bytes), 0) << "batch " << i;
  }
}

}  // namespace
}  // namespace chute
