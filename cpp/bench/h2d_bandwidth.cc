// Host-to-device bandwidth of chute's delivery path against plain CUDA copies, interleaved in one run:
//   pinned   : cudaMemcpy from cudaHostAlloc'd memory (the reference: what the link gives)
//   pageable : cudaMemcpy from malloc'd memory (what an unpinned loader gets)
//   chute    : the batch ring's pinned slots (BatchRing over CudaDevice's host allocator) copied into a
//              ring of device slots by exactly the calls DeviceLoader::issue() makes: transfer stream
//              waits on the slot's release event, copy_async of images and labels, event recorded, the
//              consumer stream waits on it and records the release.
// Prints GB/s (medians of interleaved rounds) and each path's ratio to pinned. Needs a CUDA GPU.
//   chute_h2d_bandwidth [batch_size=256] [rounds=5] [copies_per_round=40]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "chute/engine/batch_ring.h"
#include "chute/gpu/cuda_device.h"
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
}  // namespace

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 256;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const int copies = argc > 3 ? std::atoi(argv[3]) : 40;
  const CudaAvailability a = cuda_availability();
  if (!a.available) {
    std::fprintf(stderr, "h2d_bandwidth: no CUDA GPU: %s\n", a.message.c_str());
    return 2;
  }
  auto opened = open_cuda_device(0);
  if (!opened.is_ok()) die(opened.status().to_string());
  std::shared_ptr<Device> dev = *opened;
  const detail::CudartApi& api = *detail::cudart();
  const size_t sample = size_t{3} * 224 * 224;  // a uint8 224x224 RGB sample: what crosses PCIe
  const size_t images = sample * batch, labels = sizeof(int64_t) * batch, bytes = images + labels;

  constexpr int kDeviceSlots = 3, kHostSlots = 4;
  std::vector<void*> device(kDeviceSlots);
  for (auto& d : device) {
    auto p = dev->allocate_device(bytes);
    if (!p.is_ok()) die(p.status().to_string());
    d = *p;
  }
  // Reference buffers.
  void* pinned = nullptr;
  if (api.cudaHostAlloc(&pinned, bytes, detail::cudaHostAllocPortable) != detail::cudaSuccess) die("cudaHostAlloc");
  std::vector<uint8_t> pageable(bytes);
  std::memset(pinned, 1, bytes);
  std::memset(pageable.data(), 2, bytes);
  // chute's ring, from the allocator the Loader gets for device='cuda'.
  BatchRing ring(batch, sample, kHostSlots, size_t{kHostSlots} * bytes * 2, dev->host_allocator());
  std::vector<int> slots;
  for (int i = 0; i < kHostSlots; ++i) {
    slots.push_back(ring.acquire());
    std::memset(ring.images(slots.back()), 3, images);
  }
  std::vector<std::unique_ptr<DeviceEvent>> copied, released;
  for (int i = 0; i < kDeviceSlots; ++i) {
    copied.push_back(std::move(*dev->create_event()));
    released.push_back(std::move(*dev->create_event()));
  }

  auto plain = [&](const void* src) {
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < copies; ++i)
      if (api.cudaMemcpy(device[i % kDeviceSlots], src, bytes, detail::cudaMemcpyHostToDevice) != detail::cudaSuccess)
        die("cudaMemcpy");
    return copies * bytes / seconds_since(t) / 1e9;
  };
  auto chute_path = [&] {
    const StreamHandle consumer = 0;  // the legacy default stream, as a training loop's would be
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < copies; ++i) {
      const int d = i % kDeviceSlots, h = slots[i % kHostSlots];
      Status st = dev->transfer_wait(*released[d]);
      if (st.is_ok()) st = dev->copy_async(device[d], ring.images(h), images);
      if (st.is_ok()) st = dev->copy_async(static_cast<uint8_t*>(device[d]) + images, ring.labels(h), labels);
      if (st.is_ok()) st = dev->record_transfer(*copied[d]);
      if (st.is_ok()) st = dev->consumer_wait(consumer, *copied[d]);
      if (st.is_ok()) st = dev->record_consumer(*released[d], consumer);
      if (!st.is_ok()) die(st.to_string());
    }
    for (auto& e : copied) (void)dev->synchronize(*e);
    return copies * bytes / seconds_since(t) / 1e9;
  };

  chute_path(), plain(pinned), plain(pageable.data());  // warm-up
  std::vector<double> r_pinned, r_pageable, r_chute;
  for (int r = 0; r < rounds; ++r) {  // interleaved
    r_pinned.push_back(plain(pinned));
    r_chute.push_back(chute_path());
    r_pageable.push_back(plain(pageable.data()));
  }
  const double p = median(r_pinned), q = median(r_pageable), c = median(r_chute);
  std::printf(
      "H2D bandwidth, %s, %.1f MB per copy (batch %d of uint8 3x224x224 + labels), median of %d rounds x %d copies\n",
      dev->name().c_str(), bytes / 1e6, batch, rounds, copies);
  std::printf("  %-44s %8s %10s\n", "path", "GB/s", "vs pinned");
  std::printf("  %-44s %8.2f %10.2f\n", "cudaMemcpy from pinned (cudaHostAlloc)", p, 1.0);
  std::printf("  %-44s %8.2f %10.2f\n", "cudaMemcpy from pageable (malloc)", q, q / p);
  std::printf("  %-44s %8.2f %10.2f\n", "chute ring -> device slots (delivery path)", c, c / p);
  std::printf("H2D_RATIO chute/pinned=%.3f pageable/pinned=%.3f\n", c / p, q / p);
  for (auto& e : copied) e.reset();
  for (auto& e : released) e.reset();
  api.cudaFreeHost(pinned);
  for (void* d : device) dev->free_device(d, bytes);
  return 0;
}
