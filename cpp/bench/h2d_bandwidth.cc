// Host-to-device bandwidth of chute's own delivery path against plain CUDA copies, interleaved in one run:
//   pinned : cudaMemcpyAsync from cudaHostAlloc'd memory on a stream, back to back (the reference: what the
//            link gives a copy engine kept busy)
//   chute  : batches in a BatchRing's pinned slots (CudaDevice's host allocator, the memory a device='cuda'
//            Loader decodes into) delivered through DeviceSlots, the code DeviceLoader runs: issue() (the
//            transfer stream waits on the slot's release event, copy_async of images and labels, event
//            recorded), take() on the consumer's stream, the batch dropped (its release recorded)
// Both move the same bytes per copy: a batch of uint8 3x224x224 samples and its int64 labels. Prints GB/s
// (medians of interleaved rounds) and the ratio. Needs a CUDA GPU, or --simulated: chute's simulated device
// (host memory, copies on a thread), which runs every line of the chute path and tells nothing about a link.
//   chute_h2d_bandwidth [batch_size=256] [rounds=5] [copies_per_round=40] [--simulated]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "chute/engine/batch_ring.h"
#include "chute/gpu/cuda_device.h"
#include "chute/gpu/device_slots.h"
#include "chute/gpu/simulated_device.h"
#include "gpu/detail/cudart_api.h"

using namespace chute;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "h2d_bandwidth: %s\n", what.c_str());
  std::exit(1);
}

void check(const Status& st) {
  if (!st.is_ok()) die(st.to_string());
}

// The reference: copy_async from one pinned buffer, `copies` times, on one stream, then wait. On CUDA the
// raw runtime (cudaMemcpyAsync on a stream of its own); on the simulated device its transfer stream.
struct Reference {
  std::function<void(void* dst, const void* src, size_t bytes)> copy;
  std::function<void()> wait;
  void* pinned = nullptr;
};

Reference cuda_reference(size_t bytes) {
  const detail::CudartApi* api = detail::cudart();
  Reference r;
  if (api->cudaHostAlloc(&r.pinned, bytes, detail::cudaHostAllocPortable) != detail::cudaSuccess) die("cudaHostAlloc");
  std::memset(r.pinned, 1, bytes);
  detail::cudaStream_t stream = nullptr;  // lives as long as the process
  if (api->cudaStreamCreateWithFlags(&stream, detail::cudaStreamNonBlocking) != detail::cudaSuccess)
    die("cudaStreamCreate");
  r.copy = [api, stream](void* dst, const void* src, size_t n) {
    const auto e = api->cudaMemcpyAsync(dst, src, n, detail::cudaMemcpyHostToDevice, stream);
    if (e != detail::cudaSuccess) die("cudaMemcpyAsync: " + api->error(e));
  };
  r.wait = [api, stream] {
    if (api->cudaStreamSynchronize(stream) != detail::cudaSuccess) die("cudaStreamSynchronize");
  };
  return r;
}

Reference device_reference(Device& dev, size_t bytes) {
  Reference r;
  auto p = dev.allocate_host(bytes);
  if (!p.is_ok()) die(p.status().to_string());
  r.pinned = *p;
  std::memset(r.pinned, 1, bytes);
  auto event = std::shared_ptr<DeviceEvent>(std::move(*dev.create_event()));
  r.copy = [&dev](void* dst, const void* src, size_t n) { check(dev.copy_async(dst, src, n)); };
  r.wait = [&dev, event] {
    check(dev.record_transfer(*event));
    check(dev.synchronize(*event));
  };
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool simulated = std::erase(args, "--simulated") > 0;
  const int batch = args.size() > 0 ? std::atoi(args[0].c_str()) : 256;
  const int rounds = args.size() > 1 ? std::atoi(args[1].c_str()) : 5;
  const int copies = args.size() > 2 ? std::atoi(args[2].c_str()) : 40;
  if (batch < 1 || rounds < 1 || copies < 1) die("batch_size, rounds and copies_per_round must be positive");
  std::shared_ptr<Device> dev;
  if (simulated) {
    auto d = SimulatedDevice::create(1, /*max_delay_us=*/0);
    if (!d.is_ok()) die(d.status().to_string());
    dev = *d;
  } else {
    const CudaAvailability a = cuda_availability();
    if (!a.available) {
      std::fprintf(stderr, "h2d_bandwidth: no CUDA GPU: %s\n", a.message.c_str());
      return 2;
    }
    auto opened = open_cuda_device(0);
    if (!opened.is_ok()) die(opened.status().to_string());
    dev = *opened;
  }
  const size_t sample = size_t{3} * 224 * 224;  // a uint8 224x224 RGB sample: what crosses PCIe
  const size_t images = sample * batch, labels = sizeof(int64_t) * batch, bytes = images + labels;

  // The reference's destinations: three device buffers, as many as chute's slots.
  constexpr int kHostSlots = 4;
  std::vector<void*> device(3);
  for (auto& d : device) {
    auto p = dev->allocate_device(bytes);
    if (!p.is_ok()) die(p.status().to_string());
    d = *p;
  }
  Reference reference = simulated ? device_reference(*dev, bytes) : cuda_reference(bytes);
  // chute: a ring from the allocator a device='cuda' Loader gets, and device slots (device_prefetch 2).
  BatchRing ring(batch, sample, kHostSlots, size_t{kHostSlots} * bytes * 2, dev->host_allocator());
  std::vector<int> host;
  for (int i = 0; i < kHostSlots; ++i) {
    host.push_back(ring.acquire());
    std::memset(ring.images(host.back()), 3, images);
    for (int j = 0; j < batch; ++j) ring.labels(host.back())[j] = j;
  }
  auto made = DeviceSlots::create(dev, sample, batch, {.device_prefetch = 2});
  if (!made.is_ok()) die(made.status().to_string());
  std::unique_ptr<DeviceSlots> slots = std::move(*made);

  auto plain = [&] {
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < copies; ++i) reference.copy(device[i % device.size()], reference.pinned, bytes);
    reference.wait();
    return copies * bytes / seconds_since(t) / 1e9;
  };
  auto chute_path = [&] {
    const StreamHandle consumer = 0;  // the legacy default stream, as a training loop's would be
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < copies; ++i) {
      while (!slots->can_issue()) check(slots->take(consumer).status());  // taken, dropped: released
      const int h = host[i % kHostSlots];
      check(slots->issue({ring.images(h), ring.labels(h), batch, nullptr, /*pinned=*/true, i}));
    }
    while (slots->waiting() > 0) check(slots->take(consumer).status());
    slots->drain();  // every copy has completed
    return copies * bytes / seconds_since(t) / 1e9;
  };

  chute_path(), plain();  // warm-up
  std::vector<double> r_pinned, r_chute;
  for (int r = 0; r < rounds; ++r) {  // interleaved
    r_pinned.push_back(plain());
    r_chute.push_back(chute_path());
  }
  const double p = median(r_pinned), c = median(r_chute);
  std::printf(
      "H2D bandwidth, %s, %.1f MB per copy (batch %d of uint8 3x224x224 + labels), median of %d rounds x %d copies\n",
      dev->name().c_str(), bytes / 1e6, batch, rounds, copies);
  std::printf("  %-52s %8s %10s\n", "path", "GB/s", "vs pinned");
  const char* ref = simulated ? "simulated copy_async from its pinned memory"
                              : "cudaMemcpyAsync from pinned (cudaHostAlloc), one stream";
  std::printf("  %-52s %8.2f %10.2f\n", ref, p, 1.0);
  std::printf("  %-52s %8.2f %10.2f\n", "chute: ring -> DeviceSlots (issue, take, release)", c, c / p);
  std::printf("H2D_RATIO chute/pinned=%.3f pinned_GBps=%.2f chute_GBps=%.2f\n", c / p, p, c);
  slots->close();
  slots.reset();
  if (simulated) {
    dev->free_host(reference.pinned, bytes);
  } else {
    detail::cudart()->cudaFreeHost(reference.pinned);
  }
  for (void* d : device) dev->free_device(d, bytes);
  return 0;
}
