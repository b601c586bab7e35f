#include "chute/gpu/cuda_device.h"

#include <link.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>

#include "gpu/detail/cudart_api.h"

namespace chute {
namespace detail {

LoadedCudart load_cudart(const std::vector<std::string>& names) {
  LoadedCudart out;
  void* lib = nullptr;
  for (const std::string& n : names) {
    std::string why;
    lib = open_library(n, &why);
    if (lib != nullptr) break;
    if (!out.why.empty()) out.why += "; ";
    out.why += why;
  }
  if (lib == nullptr) return out;
  SymbolResolver runtime(lib);
  CudartApi& a = out.api;
  runtime(a.cudaGetErrorString, "cudaGetErrorString");
  runtime(a.cudaGetDeviceCount, "cudaGetDeviceCount");
  runtime(a.cudaGetDevice, "cudaGetDevice");
  runtime(a.cudaSetDevice, "cudaSetDevice");
  runtime(a.cudaDeviceGetPCIBusId, "cudaDeviceGetPCIBusId");
  runtime(a.cudaHostAlloc, "cudaHostAlloc");
  runtime(a.cudaFreeHost, "cudaFreeHost");
  runtime(a.cudaHostRegister, "cudaHostRegister");
  runtime(a.cudaHostUnregister, "cudaHostUnregister");
  runtime(a.cudaMalloc, "cudaMalloc");
  runtime(a.cudaFree, "cudaFree");
  runtime(a.cudaStreamCreateWithFlags, "cudaStreamCreateWithFlags");
  runtime(a.cudaStreamDestroy, "cudaStreamDestroy");
  runtime(a.cudaStreamSynchronize, "cudaStreamSynchronize");
  runtime(a.cudaStreamWaitEvent, "cudaStreamWaitEvent");
  runtime(a.cudaEventCreateWithFlags, "cudaEventCreateWithFlags");
  runtime(a.cudaEventDestroy, "cudaEventDestroy");
  runtime(a.cudaEventRecord, "cudaEventRecord");
  runtime(a.cudaEventQuery, "cudaEventQuery");
  runtime(a.cudaEventSynchronize, "cudaEventSynchronize");
  runtime(a.cudaMemcpyAsync, "cudaMemcpyAsync");
  runtime(a.cudaMemcpy, "cudaMemcpy");
  if (const char* missing = runtime.missing()) {
    out.why = std::string("libcudart has no ") + missing;
    return out;
  }
  // The driver, for the primary context of a device (ContextGuard). The process's own if loaded.
  std::string why;
  void* driver = open_library("libcuda.so.1", &why, /*only_if_loaded=*/true);
  if (driver == nullptr) driver = open_library("libcuda.so.1", &why);
  if (driver == nullptr) {
    out.why = "the CUDA driver: " + why;
    return out;
  }
  SymbolResolver cuda(driver);
  cuda(a.cuInit, "cuInit");
  cuda(a.cuDeviceGet, "cuDeviceGet");
  cuda(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  cuda(a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  cuda(a.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  cuda(a.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  if (const char* missing = cuda.missing()) {
    out.why = std::string("libcuda has no ") + missing;
    return out;
  }
  out.ok = true;
  out.why.clear();  // the names tried before the one that loaded
  return out;
}

std::vector<std::string> loaded_cudart_paths() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name;
        if (name == nullptr || *name == '\0') return 0;
        const char* base = std::strrchr(name, '/');
        base = base != nullptr ? base + 1 : name;
        if (std::strncmp(base, "libcudart.so", 12) == 0) static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &paths);
  return paths;
}

LoadedCudart find_cudart(const std::vector<std::string>& candidates) {
  // A runtime already in the process (torch's) is the only one that may be used: a second would be a
  // second set of contexts' runtime state, streams and events that torch's cannot see.
  if (const std::vector<std::string> loaded = loaded_cudart_paths(); !loaded.empty()) {
    LoadedCudart l = load_cudart({loaded.front()});
    if (!l.ok) l.why = "the libcudart already loaded in this process (" + loaded.front() + "): " + l.why;
    return l;
  }
  std::vector<std::string> names;
  if (const char* env = std::getenv("CHUTE_CUDART"); env != nullptr && *env != '\0') names.push_back(env);
  names.insert(names.end(), candidates.begin(), candidates.end());
  names.insert(names.end(), {"libcudart.so.13", "libcudart.so.12", "libcudart.so"});
  return load_cudart(names);
}

namespace {
std::mutex candidates_mu;
std::vector<std::string> cudart_candidates;  // guarded by candidates_mu
}  // namespace

void set_cudart_candidates(std::vector<std::string> paths) {
  std::lock_guard<std::mutex> lock(candidates_mu);
  cudart_candidates = std::move(paths);
}

const CudartApi* cudart(std::string* why) {
  static ProcessApi<CudartApi> runtime;
  return runtime.get(
      [] {
        std::vector<std::string> candidates;
        {
          std::lock_guard<std::mutex> lock(candidates_mu);
          candidates = cudart_candidates;
        }
        return find_cudart(candidates);
      },
      why);
}

}  // namespace detail

namespace {
using namespace detail;

Status cuda_error(const CudartApi& api, const char* what, cudaError_t e) {
  return Status(StatusCode::kIoError, std::string(what) + ": " + api.error(e));
}

// Makes a device's primary context current for its scope, and restores exactly what the thread had
// (nothing, on a fresh thread): the runtime calls inside run on that device, and no other device is touched.
// cudaSetDevice cannot do this: "restoring" device 0 on a fresh thread (workers, tensor deleters, the
// loader's constructor) creates GPU 0's primary context, and its memory, on every rank of a multi-GPU job.
class ContextGuard {
 public:
  ContextGuard(const CudartApi& api, CUcontext context) : api_(api) { pushed_ = api_.cuCtxPushCurrent(context) == 0; }
  ~ContextGuard() {
    CUcontext popped = nullptr;
    if (pushed_) api_.cuCtxPopCurrent(&popped);
  }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  const CudartApi& api_;
  bool pushed_ = false;
};

// Every runtime call runs under the device's context, its destruction too: a runtime call on a thread with
// no current context would initialise the current device's (device 0's) primary context.
struct CudaEvent final : DeviceEvent {
  const CudartApi* api;
  CUcontext context;
  cudaEvent_t event;
  CudaEvent(const CudartApi* a, CUcontext c, cudaEvent_t e) : api(a), context(c), event(e) {}
  ~CudaEvent() override;
};

CudaEvent::~CudaEvent() {
  ContextGuard guard(*api, context);
  api->cudaEventDestroy(event);  // errors at process exit are of no use
}

cudaEvent_t raw(DeviceEvent& e) { return static_cast<CudaEvent&>(e).event; }
cudaStream_t stream_of(StreamHandle s) { return reinterpret_cast<cudaStream_t>(s); }

class CudaDevice;

// Pinned memory for the batch ring. If the system refuses to pin more (ulimit -l, or memory pressure),
// it falls back to pageable memory and says so once: copies from it are slower (staged by the driver),
// never wrong.
class CudaHostAllocator final : public HostAllocator {
 public:
  explicit CudaHostAllocator(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  void* allocate(size_t bytes) override {
    auto p = device_->allocate_host(bytes);
    if (p.is_ok()) return *p;
    void* q = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (q == nullptr) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(mu_);
    pageable_.insert(q);
    if (!warned_) {
      warned_ = true;
      std::fprintf(stderr,
                   "chute: could not pin a %zu-byte batch buffer (%s); using pageable memory, whose copies "
                   "to the GPU are slower\n",
                   bytes, p.status().message().c_str());
    }
    return q;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pageable_.erase(p) > 0) {
        std::free(p);
        return;
      }
    }
    device_->free_host(p, bytes);
  }
  bool pinned() const override { return true; }
  std::string name() const override { return "cuda pinned"; }

 private:
  std::shared_ptr<Device> device_;
  std::mutex mu_;
  std::unordered_set<void*> pageable_;
  bool warned_ = false;
};

class CudaDevice final : public Device, public std::enable_shared_from_this<CudaDevice> {
 public:
  CudaDevice(const CudartApi* api, int index, CUdevice device, CUcontext context, cudaStream_t stream)
      : api_(api), index_(index), device_(device), context_(context), stream_(stream) {}
  ~CudaDevice() override {
    {
      ContextGuard guard(*api_, context_);
      api_->cudaStreamSynchronize(stream_);
      api_->cudaStreamDestroy(stream_);
    }
    api_->cuDevicePrimaryCtxRelease(device_);
  }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int index() const override { return index_; }
  std::string name() const override { return "cuda:" + std::to_string(index_); }

  Result<void*> allocate_host(size_t bytes) override {
    ContextGuard guard(*api_, context_);
    void* p = nullptr;
    // Portable: usable as pinned memory by every device's context, not only this one's.
    if (auto e = api_->cudaHostAlloc(&p, bytes, cudaHostAllocPortable); e != cudaSuccess)
      return Status(StatusCode::kResourceExhausted,
                    "cudaHostAlloc of " + std::to_string(bytes) + " bytes: " + api_->error(e));
    return p;
  }
  void free_host(void* p, size_t) noexcept override {
    if (p == nullptr) return;
    ContextGuard guard(*api_, context_);
    api_->cudaFreeHost(p);
  }
  std::shared_ptr<HostAllocator> host_allocator() override {
    return std::make_shared<CudaHostAllocator>(shared_from_this());
  }
  Status register_host(void* p, size_t bytes) override {
    ContextGuard guard(*api_, context_);
    if (auto e = api_->cudaHostRegister(p, bytes, cudaHostRegisterPortable); e != cudaSuccess)
      return Status(StatusCode::kResourceExhausted,
                    "cudaHostRegister of " + std::to_string(bytes) + " bytes: " + api_->error(e));
    return Status::ok();
  }
  void unregister_host(void* p, size_t) noexcept override {
    if (p == nullptr) return;
    ContextGuard guard(*api_, context_);
    api_->cudaHostUnregister(p);
  }
  Result<void*> allocate_device(size_t bytes) override {
    ContextGuard guard(*api_, context_);
    void* p = nullptr;
    if (auto e = api_->cudaMalloc(&p, bytes); e != cudaSuccess)
      return Status(StatusCode::kResourceExhausted,
                    "cudaMalloc of " + std::to_string(bytes) + " bytes on " + name() + ": " + api_->error(e));
    return p;
  }
  void free_device(void* p, size_t) noexcept override {
    if (p == nullptr) return;
    ContextGuard guard(*api_, context_);
    api_->cudaFree(p);
  }
  Result<std::unique_ptr<DeviceEvent>> create_event() override {
    ContextGuard guard(*api_, context_);
    cudaEvent_t e = nullptr;
    if (auto err = api_->cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess)
      return cuda_error(*api_, "cudaEventCreate", err);
    return std::unique_ptr<DeviceEvent>(std::make_unique<CudaEvent>(api_, context_, e));
  }
  Status copy_async(void* dst, const void* src, size_t bytes) override {
    ContextGuard guard(*api_, context_);
    if (auto e = api_->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_); e != cudaSuccess)
      return cuda_error(*api_, "cudaMemcpyAsync", e);
    return Status::ok();
  }
  Status record_transfer(DeviceEvent& event) override { return record(event, stream_); }
  Status record_consumer(DeviceEvent& event, StreamHandle consumer) override {
    // A batch freed at interpreter exit, after the runtime began unloading: no stream will run again.
    if (Status st = record(event, stream_of(consumer)); !st.is_ok() && !unloading_) return st;
    return Status::ok();
  }
  Status transfer_wait(DeviceEvent& event) override { return wait(stream_, event); }
  Status consumer_wait(StreamHandle consumer, DeviceEvent& event) override { return wait(stream_of(consumer), event); }
  Result<bool> query(DeviceEvent& event) override {
    ContextGuard guard(*api_, context_);
    const cudaError_t e = api_->cudaEventQuery(raw(event));
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return cuda_error(*api_, "cudaEventQuery", e);
  }
  Status synchronize(DeviceEvent& event) override {
    ContextGuard guard(*api_, context_);
    if (auto e = api_->cudaEventSynchronize(raw(event)); e != cudaSuccess)
      return cuda_error(*api_, "cudaEventSynchronize", e);
    return Status::ok();
  }

 private:
  Status record(DeviceEvent& event, cudaStream_t stream) {
    ContextGuard guard(*api_, context_);
    if (auto e = api_->cudaEventRecord(raw(event), stream); e != cudaSuccess) {
      if (e == cudaErrorCudartUnloading) unloading_ = true;
      return cuda_error(*api_, "cudaEventRecord", e);
    }
    return Status::ok();
  }
  Status wait(cudaStream_t stream, DeviceEvent& event) {
    ContextGuard guard(*api_, context_);
    if (auto e = api_->cudaStreamWaitEvent(stream, raw(event), 0); e != cudaSuccess)
      return cuda_error(*api_, "cudaStreamWaitEvent", e);
    return Status::ok();
  }

  const CudartApi* api_;
  int index_;
  CUdevice device_;
  CUcontext context_;    // the device's primary context, retained for the device's life
  cudaStream_t stream_;  // the transfer stream
  std::atomic<bool> unloading_{false};
};

constexpr const char* kNeeds = "device='cuda' needs libcudart / a CUDA GPU: ";
}  // namespace

CudaAvailability cuda_availability() {
  CudaAvailability a;
  std::string why;
  const CudartApi* api = cudart(&why);
  if (api == nullptr) {
    a.message = why;
    return a;
  }
  int n = 0;
  if (auto e = api->cudaGetDeviceCount(&n); e != cudaSuccess) {
    a.message = api->error(e);
    return a;
  }
  a.device_count = n;
  a.available = n > 0;
  a.message = n > 0 ? std::to_string(n) + " CUDA device(s)" : "no CUDA device";
  return a;
}

namespace detail {
Result<std::shared_ptr<Device>> open_cuda_device_with(const CudartApi* api, int index) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (api->cuInit(0) != 0 || api->cuDeviceGet(&device, index) != 0 ||
      api->cuDevicePrimaryCtxRetain(&context, device) != 0)
    return Status(StatusCode::kUnsupported,
                  kNeeds + std::string("the CUDA driver cannot open cuda:") + std::to_string(index));
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaSuccess;
  {
    ContextGuard guard(*api, context);
    e = api->cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  }
  if (e != cudaSuccess) {
    api->cuDevicePrimaryCtxRelease(device);
    return Status(StatusCode::kUnsupported, kNeeds + std::string("cudaStreamCreate: ") + api->error(e));
  }
  return std::shared_ptr<Device>(std::make_shared<CudaDevice>(api, index, device, context, stream));
}
}  // namespace detail

Result<std::shared_ptr<Device>> open_cuda_device(int index) {
  const CudaAvailability a = cuda_availability();
  if (!a.available) return Status(StatusCode::kUnsupported, kNeeds + a.message);
  if (index < 0 || index >= a.device_count)
    return invalid_argument("cuda:" + std::to_string(index) + " does not exist: " + std::to_string(a.device_count) +
                            " CUDA device(s) are visible");
  return detail::open_cuda_device_with(cudart(), index);
}

void set_cudart_candidates(std::vector<std::string> paths) { detail::set_cudart_candidates(std::move(paths)); }
std::vector<std::string> loaded_cudart_paths() { return detail::loaded_cudart_paths(); }

std::string cuda_pci_bus_id(int index) {
  const CudartApi* api = cudart();
  if (api == nullptr) return {};
  char id[32] = {};
  if (api->cudaDeviceGetPCIBusId(id, sizeof(id), index) != cudaSuccess) return {};
  return id;
}

}  // namespace chute
