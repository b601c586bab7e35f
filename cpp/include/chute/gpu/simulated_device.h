// SimulatedDevice: a Device whose "device memory" is host memory and whose transfer stream is a thread
// that runs each copy after a random delay, in two halves with a pause between them. It exists to test
// the slot-reuse protocol (delivery.h) without a GPU, and it checks that protocol as it runs:
//   - a copy's source must lie in live pinned memory of this device (allocated or registered), and must
//     not change between copy_async() and the copy's completion (a host buffer reused before its copy
//     completed); unregistering memory a queued copy reads is a breach too;
//   - registered memory must still be the memory that was registered: a copy from a registered range
//     that was unmapped, with other memory mapped at its address since, is a breach (CUDA would read the
//     pages pinned at registration, not the memory there now). A registration that outlived its memory
//     (unregistered only after the range was unmapped or replaced) is counted in outlived_registrations();
//   - a copy's destination must lie in live device memory of this device;
//   - memory is poisoned (0xDB) when freed, so a read after free shows;
//   - frees must match allocations.
// Each breach is counted in violations(); the first is described by first_violation().
//
// The consumer's "stream" is the host thread itself: consumer_wait() blocks until the event has
// completed and record_consumer() completes at once, since the consumer's work on a batch is done by the
// time it releases it.
//
// It also plays the consumer's side of pinned CPU batches (pin_memory, the BlockPool hand-over), as torch
// does it on a GPU: consumer streams of their own, each a thread whose copies lag (a GPU with a backlog);
// copy_to_device() like tensor.to("cuda", non_blocking=True), which records its stream on the source's
// block; and a caching host allocator like torch's (allocate_block/free_block): every request is rounded up
// to a power of two, and a freed block gets an event on every stream that copied from it and is lent again
// only once those events have completed.
//
// Test-only: never a production backend (Python's device='sim' exists for the tests).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "chute/base/fork.h"
#include "chute/base/memory_map.h"
#include "chute/gpu/device.h"

namespace chute {

class SimulatedDevice final : public Device, public std::enable_shared_from_this<SimulatedDevice> {
 public:
  // Each half of a copy waits a random time in [min_delay_us, max_delay_us].
  // Fails (kResourceExhausted) when its transfer thread cannot be started.
  static Result<std::shared_ptr<SimulatedDevice>> create(uint64_t seed = 0, int max_delay_us = 200,
                                                         int min_delay_us = 0);
  ~SimulatedDevice() override;

  DeviceKind kind() const override { return DeviceKind::kSimulated; }
  int index() const override { return 0; }
  std::string name() const override { return "simulated"; }
  Result<void*> allocate_host(size_t bytes) override;
  void free_host(void* p, size_t bytes) noexcept override;
  std::shared_ptr<HostAllocator> host_allocator() override;
  Status register_host(void* p, size_t bytes) override;
  void unregister_host(void* p, size_t bytes) noexcept override;
  Result<void*> allocate_device(size_t bytes) override;
  void free_device(void* p, size_t bytes) noexcept override;
  Result<std::unique_ptr<DeviceEvent>> create_event() override;
  Status copy_async(void* dst, const void* src, size_t bytes) override;
  Status record_transfer(DeviceEvent& event) override;
  Status record_consumer(DeviceEvent& event, StreamHandle consumer) override;
  Status transfer_wait(DeviceEvent& event) override;
  Status consumer_wait(StreamHandle consumer, DeviceEvent& event) override;
  Result<bool> query(DeviceEvent& event) override;
  Status synchronize(DeviceEvent& event) override;

  // The consumer's side (see above). Stream ids start at 1 (0 is the transfer stream).
  Result<int> create_stream(int min_delay_us, int max_delay_us);
  Result<void*> allocate_block(size_t bytes);
  void free_block(void* p) noexcept;
  Result<void*> copy_to_device(const void* src, size_t bytes, int stream);
  Status synchronize_stream(int stream);

  int64_t violations() const;
  std::string first_violation() const;
  int64_t outlived_registrations() const;  // unregistered after their memory was unmapped or replaced
  int64_t copies() const;                  // completed
  size_t live_host_bytes() const;          // allocated and not yet freed
  size_t live_device_bytes() const;

  struct EventState;

 private:
  SimulatedDevice(uint64_t seed, int max_delay_us, int min_delay_us);
  struct Op;
  struct Stream;
  struct Block;
  struct Registration {
    size_t bytes;
    Mapping mapping;  // what was mapped there at register_host()
  };
  void run(Stream& stream);
  Status start_stream(int min_delay_us, int max_delay_us);  // with mu_ held; a refused thread is its Status
  void violation(std::string what);                         // with mu_ held
  bool live(const std::map<uintptr_t, size_t>& allocations, const void* p, size_t bytes) const;
  // With mu_ held: the registration holding [p, p + bytes), or null.
  const Registration* registration(const void* p, size_t bytes) const;
  bool pinned(const void* p, size_t bytes) const;  // with mu_ held: allocated or registered host memory
  Result<void*> allocate(std::map<uintptr_t, size_t>& allocations, size_t bytes);
  void release(std::map<uintptr_t, size_t>& allocations, void* p, size_t bytes, const char* what) noexcept;

  const int min_delay_us_, max_delay_us_;
  mutable std::mutex mu_;
  std::condition_variable cv_;                    // ops queued, events completed, queue drained
  std::vector<std::unique_ptr<Stream>> streams_;  // [0]: the transfer stream; then the consumer's
  bool stop_ = false;
  const uint64_t seed_;
  std::map<uintptr_t, size_t> host_, device_;
  std::map<uintptr_t, Registration> registered_;  // the caller's host memory (register_host), never freed here
  int64_t outlived_ = 0;
  std::map<uintptr_t, Block> blocks_;  // the consumer's caching host allocator
  int64_t violations_ = 0;
  std::string first_violation_;
  int64_t copies_ = 0;
  ForkMark fork_mark_;  // in a forked child, the destructor leaves the parent's threads alone
};

}  // namespace chute
