// The CUDA backend. Without libcudart or a GPU (CI, the development machine) it checks the clean failure;
// with one it runs real copies through the delivery protocol. Tests that need a GPU are skipped, not
// passed, where there is none.
#include "chute/gpu/cuda_device.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chute/gpu/delivery.h"
#include "gpu/detail/cudart_api.h"
#include "test_util.h"

namespace chute {
namespace {

TEST(CudaDeviceTest, WithoutAGpuOpeningFailsWithAClearError) {
  const CudaAvailability a = cuda_availability();
  if (a.available) GTEST_SKIP() << "runs only without a GPU: a CUDA GPU is present: " << a.message;
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

// A recording CUDA: the driver's per-thread context stack, and a runtime whose every call checks which
// context is current. CUDA itself is not needed: the table is handed to open_cuda_device_with().
namespace fake {
thread_local std::vector<detail::CUcontext> contexts;  // the thread's stack; empty on a fresh thread
std::mutex mu;
std::vector<std::string> calls;  // device selections and primary-context retains
std::vector<std::string> wrong;  // runtime calls made without cuda:1's context current
detail::CUcontext context_of(int device) { return reinterpret_cast<detail::CUcontext>(uintptr_t{0x1000} + device); }
void note(std::vector<std::string>& to, std::string what) {
  std::lock_guard<std::mutex> lock(mu);
  to.push_back(std::move(what));
}
int on_device_1(const char* what) {
  if (contexts.empty() || contexts.back() != context_of(1)) note(wrong, what);
  return 0;
}
detail::CudartApi api() {
  detail::CudartApi a{};
  a.cudaGetErrorString = [](int) { return "fake"; };
  a.cudaGetDeviceCount = [](int* n) { return *n = 2, 0; };
  a.cudaGetDevice = [](int* d) { return *d = 0, 0; };  // what CUDA says on a fresh thread
  a.cudaSetDevice = [](int d) { return note(calls, "cudaSetDevice " + std::to_string(d)), 0; };
  a.cudaDeviceGetPCIBusId = [](char*, int, int) { return 0; };
  a.cudaHostAlloc = [](void** p, size_t n, unsigned) { return *p = std::malloc(n), on_device_1("cudaHostAlloc"); };
  a.cudaFreeHost = [](void* p) { return std::free(p), on_device_1("cudaFreeHost"); };
  a.cudaHostRegister = [](void*, size_t, unsigned) { return on_device_1("cudaHostRegister"); };
  a.cudaHostUnregister = [](void*) { return on_device_1("cudaHostUnregister"); };
  a.cudaMalloc = [](void** p, size_t n) { return *p = std::malloc(n), on_device_1("cudaMalloc"); };
  a.cudaFree = [](void* p) { return std::free(p), on_device_1("cudaFree"); };
  a.cudaStreamCreateWithFlags = [](detail::cudaStream_t* s, unsigned) {
    return *s = reinterpret_cast<detail::cudaStream_t>(uintptr_t{0x2000}), on_device_1("cudaStreamCreate");
  };
  a.cudaStreamDestroy = [](detail::cudaStream_t) { return on_device_1("cudaStreamDestroy"); };
  a.cudaStreamSynchronize = [](detail::cudaStream_t) { return on_device_1("cudaStreamSynchronize"); };
  a.cudaStreamWaitEvent = [](detail::cudaStream_t, detail::cudaEvent_t, unsigned) {
    return on_device_1("cudaStreamWaitEvent");
  };
  a.cudaEventCreateWithFlags = [](detail::cudaEvent_t* e, unsigned) {
    return *e = reinterpret_cast<detail::cudaEvent_t>(uintptr_t{0x3000}), on_device_1("cudaEventCreate");
  };
  a.cudaEventDestroy = [](detail::cudaEvent_t) { return on_device_1("cudaEventDestroy"); };
  a.cudaEventRecord = [](detail::cudaEvent_t, detail::cudaStream_t) { return on_device_1("cudaEventRecord"); };
  a.cudaEventQuery = [](detail::cudaEvent_t) { return on_device_1("cudaEventQuery"); };
  a.cudaEventSynchronize = [](detail::cudaEvent_t) { return on_device_1("cudaEventSynchronize"); };
  a.cudaMemcpyAsync = [](void* d, const void* s, size_t n, int, detail::cudaStream_t) {
    return std::memcpy(d, s, n), on_device_1("cudaMemcpyAsync");
  };
  a.cudaMemcpy = [](void* d, const void* s, size_t n, int) { return std::memcpy(d, s, n), on_device_1("cudaMemcpy"); };
  a.cuInit = [](unsigned) { return 0; };
  a.cuDeviceGet = [](detail::CUdevice* d, int ordinal) { return *d = ordinal, 0; };
  a.cuDevicePrimaryCtxRetain = [](detail::CUcontext* c, detail::CUdevice d) {
    return *c = context_of(d), note(calls, "retain " + std::to_string(d)), 0;
  };
  a.cuDevicePrimaryCtxRelease = [](detail::CUdevice) { return 0; };
  a.cuCtxPushCurrent = [](detail::CUcontext c) { return contexts.push_back(c), 0; };
  a.cuCtxPopCurrent = [](detail::CUcontext* c) {
    if (contexts.empty()) return 201;  // CUDA_ERROR_INVALID_CONTEXT
    *c = contexts.back();
    contexts.pop_back();
    return 0;
  };
  return a;
}
}  // namespace fake

// A loader on cuda:1 must never select or create another device's context: not on the thread that opens
// it, not on fresh threads (workers growing the ring, tensor deleters), and the caller's context is
// restored exactly, including "none".
TEST(CudaDeviceTest, NeverTouchesADeviceItWasNotGiven) {
  static const detail::CudartApi api = fake::api();
  fake::calls.clear();
  fake::wrong.clear();
  fake::contexts = {fake::context_of(0)};  // the user's thread works on cuda:0
  std::shared_ptr<Device> device;
  {
    auto d = detail::open_cuda_device_with(&api, 1);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    device = *d;
  }
  auto use = [&] {
    auto host = device->allocate_host(64);
    auto dev = device->allocate_device(64);
    auto event = device->create_event();
    ASSERT_TRUE(host.is_ok() && dev.is_ok() && event.is_ok());
    EXPECT_TRUE(device->copy_async(*dev, *host, 64).is_ok());
    std::vector<uint8_t> theirs(64);
    EXPECT_TRUE(device->register_host(theirs.data(), theirs.size()).is_ok());
    EXPECT_TRUE(device->copy_async(*dev, theirs.data(), 64).is_ok());
    EXPECT_TRUE(device->record_transfer(**event).is_ok());
    EXPECT_TRUE(device->record_consumer(**event, 0).is_ok());
    EXPECT_TRUE(device->consumer_wait(0, **event).is_ok());
    EXPECT_TRUE(device->query(**event).is_ok());
    EXPECT_TRUE(device->synchronize(**event).is_ok());
    event->reset();
    device->free_device(*dev, 64);
    device->free_host(*host, 64);
    device->unregister_host(theirs.data(), theirs.size());
  };
  use();
  EXPECT_EQ(fake::contexts, std::vector<detail::CUcontext>{fake::context_of(0)});  // the caller's, untouched
  std::thread fresh([&] {
    use();
    EXPECT_TRUE(fake::contexts.empty()) << "a fresh thread was left with a current context";
  });
  fresh.join();
  device.reset();
  fake::contexts.clear();
  EXPECT_EQ(fake::calls, std::vector<std::string>{"retain 1"});  // no cudaSetDevice, no other context
  EXPECT_TRUE(fake::wrong.empty()) << fake::wrong.front() << " ran without cuda:1's context current";
}

class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaAvailability a = cuda_availability();
    if (!a.available) GTEST_SKIP() << "needs a CUDA GPU: " << a.message;
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

// chute.ray's path: shared memory the process did not allocate (Ray's object store maps a /dev/shm file),
// registered once, is the source of the async copy.
TEST_F(CudaGpuTest, RegisteredSharedMemoryIsACopySource) {
  const detail::CudartApi* api = detail::cudart();
  constexpr size_t n = 8 << 20;
  void* shared = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(shared)[i] = static_cast<uint8_t>(i * 13 + 5);
  ASSERT_TRUE(device_->register_host(shared, n).is_ok());
  void* dev = *device_->allocate_device(n);
  auto ev = std::move(*device_->create_event());
  ASSERT_TRUE(device_->copy_async(dev, shared, n).is_ok());
  ASSERT_TRUE(device_->record_transfer(*ev).is_ok());
  ASSERT_TRUE(device_->synchronize(*ev).is_ok());
  std::vector<uint8_t> back(n);
  ASSERT_EQ(api->cudaMemcpy(back.data(), dev, n, detail::cudaMemcpyDeviceToHost), detail::cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), shared, n), 0);
  ev.reset();
  device_->free_device(dev, n);
  device_->unregister_host(shared, n);
  munmap(shared, n);
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
  auto host = std::shared_ptr<Loader>(
      std::move(*Loader::create(source, std::move(*Pipeline::create({CenterCrop{kH, kW}})), o)));
  DeliveryOptions d{.device_prefetch = 2};
  DeviceLoader::prepare(o, *device_, d);
  auto dl = DeviceLoader::create(device_,
                                 std::shared_ptr<Loader>(std::move(
                                     *Loader::create(source, std::move(*Pipeline::create({CenterCrop{kH, kW}})), o))),
                                 d);
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
