// Device: what GPU delivery needs from an accelerator, kept to the slot-reuse protocol so that it can be
// simulated (simulated_device.h) and tested without a GPU, and implemented for CUDA (cuda_device.h)
// without a link-time dependency on it.
//
// The model is CUDA's. A device has one *transfer stream* of its own, on which copy_async() runs copies
// in the order they were issued. The *consumer stream* is the caller's (for torch,
// torch.cuda.current_stream().cuda_stream), passed as an opaque handle. Events mark a point in a
// stream: record_*() places one, query()/synchronize() ask the host whether the work before it is done,
// and *_wait() makes a stream wait for it without blocking the host.
//
// Thread-safety: every method may be called from any thread. An Event is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "chute/base/status.h"
#include "chute/engine/host_allocator.h"

namespace chute {

// A CUDA stream (cudaStream_t) as an integer; 0 is the legacy default stream.
using StreamHandle = uintptr_t;

// An event of a device: opaque, created by Device::create_event(), destroyed before its device.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

enum class DeviceKind { kCuda, kSimulated };

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;  // the device ordinal (cuda:N)
  virtual std::string name() const = 0;

  // Host memory the device copies from by DMA (page-locked), allocated once and reused by the ring.
  virtual Result<void*> allocate_host(size_t bytes) = 0;
  virtual void free_host(void* p, size_t bytes) noexcept = 0;
  // A HostAllocator over allocate_host() for the batch ring; it keeps this device alive.
  virtual std::shared_ptr<HostAllocator> host_allocator() = 0;

  // Host memory the caller owns (chute.ray: a mapping of Ray's object store) made a DMA source like
  // allocate_host()'s: cudaHostRegister. Pinning is slow: register large ranges once and keep them.
  // unregister_host() only once no copy reads the range; the memory stays the caller's.
  virtual Status register_host(void* p, size_t bytes) = 0;
  virtual void unregister_host(void* p, size_t bytes) noexcept = 0;

  virtual Result<void*> allocate_device(size_t bytes) = 0;
  // Call only once no stream uses `p` any more (synchronize the events that guard it first).
  virtual void free_device(void* p, size_t bytes) noexcept = 0;

  virtual Result<std::unique_ptr<DeviceEvent>> create_event() = 0;
  // Host -> device copy on the transfer stream; `src` and `dst` must stay untouched until an event
  // recorded after it has completed.
  virtual Status copy_async(void* dst, const void* src, size_t bytes) = 0;
  // Marks the current end of the transfer stream / of the consumer's stream.
  virtual Status record_transfer(DeviceEvent& event) = 0;
  virtual Status record_consumer(DeviceEvent& event, StreamHandle consumer) = 0;
  // Work issued to the stream from now on starts only after `event` has completed. The host is not
  // blocked (except by the simulated device, whose consumer is the host itself).
  virtual Status transfer_wait(DeviceEvent& event) = 0;
  virtual Status consumer_wait(StreamHandle consumer, DeviceEvent& event) = 0;
  // Whether the work before the event's last record has completed (true when it was never recorded).
  virtual Result<bool> query(DeviceEvent& event) = 0;
  virtual Status synchronize(DeviceEvent& event) = 0;
};

}  // namespace chute
