// DeviceSlots: the device side of GPU delivery, for any source of host batches: a Loader's pinned ring
// (DeviceLoader, delivery.h) or host memory handed in from outside (chute.ray's RemoteLoader: batches in
// Ray's object store). It owns device_prefetch + 1 slots of device memory, allocated once within
// max_device_memory, and runs the slot-reuse protocol that simulated_device.h checks:
//
//   host batch --issue(): copy_async on the transfer stream, event `copied`--> device slot
//   --take(): the consumer stream waits on `copied`--> DeviceBatch --released: event `released` recorded
//   on the consumer's stream--> slot free; the transfer stream waits on `released` before its next copy
//
// A host batch's owner (`keep`) is held until its copy has completed (reap() looks at each take()),
// so its memory is neither freed nor reused under the copy. The copy reads the host memory itself when
// that is pinned: the device's own (a Loader ring built with DeviceLoader::prepare()) or ranges
// registered with register_host() (cudaHostRegister). Other memory is first copied into a pinned
// staging buffer of the slot's own, so a pageable source never makes a synchronous copy.
//
// A registration pins the pages mapped at that moment and lasts until it is unregistered, whatever
// happens to the mapping: if the range is unmapped and other memory is mapped at the same address, a
// copy from there would still read the old pages (wrong bytes, no error). So a registered range is tied
// to its mapping (chute/base/memory_map.h): issue() checks before each copy that the memory it reads is
// still the memory registered, and a range that was unmapped or replaced is unregistered (after the
// copies in flight) and that batch staged; stale_ranges() counts them. The owner of the memory
// unregisters a range before the memory goes (unregister_host(), close()): the check is the guard for
// memory that went without notice, and until it runs, the stale registration also misleads other code's
// copies from that address (docs/GPU.md, "Registered memory").
//
// Thread-safety: one consumer thread calls everything but DeviceBatch's destructor, which may run on any
// thread, also after the DeviceSlots are gone.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "chute/base/memory_map.h"
#include "chute/base/option_range.h"
#include "chute/base/status.h"
#include "chute/gpu/device.h"

namespace chute {

struct DeliveryOptions {
  int device_prefetch = 2;                     // batches copied ahead of the consumer
  size_t max_device_memory = size_t{4} << 30;  // bytes of device batch buffers, at most

  // device_prefetch + 1 ring slots must stay a C int.
  static constexpr OptionRange kDevicePrefetch{"device_prefetch", 1, kInt32Max - 1};
  static constexpr OptionRange kMaxDeviceMemory{"max_device_memory", 1, kUInt64Max};
  Status validate() const;  // DeviceSlots::create runs it
};

struct DeviceRing;

// A batch in device memory. Its slot returns to the ring when the last reference goes, on any thread;
// the release is recorded on the stream the batch was delivered to.
class DeviceBatch {
 public:
  DeviceBatch(std::shared_ptr<DeviceRing> ring, int slot, int64_t size, StreamHandle stream);
  ~DeviceBatch();
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  int64_t size() const { return size_; }
  void* images() const { return images_; }     // device memory, the source's layout and dtype
  int64_t* labels() const { return labels_; }  // device memory
  StreamHandle stream() const { return stream_; }

 private:
  std::shared_ptr<DeviceRing> ring_;
  int slot_;
  int64_t size_;
  StreamHandle stream_;
  void* images_;
  int64_t* labels_;
};

// A host batch to copy: `count` samples of sample_bytes() at `images`, `count` labels at `labels`.
struct HostBatch {
  const void* images = nullptr;
  const int64_t* labels = nullptr;
  int64_t count = 0;
  std::shared_ptr<const void> keep;  // owns the memory; held until the copy has completed
  bool pinned = false;               // the device's own pinned memory (else: registered, or staged)
  int64_t tag = 0;                   // handed back by take() (DeviceLoader: the epoch position after it)
};

class DeviceSlots {
 public:
  // Slots for batches of up to `batch_size` samples of `sample_bytes` each (and their int64 labels).
  static Result<std::unique_ptr<DeviceSlots>> create(std::shared_ptr<Device> device, size_t sample_bytes,
                                                     int64_t batch_size, DeliveryOptions options = {});
  ~DeviceSlots();
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;

  // Makes [p, p + bytes) a source the copies read directly, until unregister_host() or close(). The range
  // lies in one mapping of the process (kInvalidArgument otherwise). Registered ranges must not overlap;
  // adjacent ones may, and a copy across them is split at the boundary.
  Status register_host(void* p, size_t bytes);
  // Waits for the copies in flight, then unregisters every range that meets [p, p + bytes): call it
  // before that memory is unmapped.
  void unregister_host(const void* p, size_t bytes);
  bool registered(const void* p, size_t bytes) const;  // wholly inside registered ranges
  // Registered ranges found unmapped or replaced by issue() before they were unregistered.
  int64_t stale_ranges() const { return stale_ranges_; }

  // Whether issue() can start a copy now: a free slot, and fewer than device_prefetch batches issued and
  // not yet taken.
  bool can_issue() const;
  // Copies a host batch into a free slot (kResourceExhausted when there is none: the consumer holds them).
  Status issue(HostBatch batch);
  int waiting() const { return static_cast<int>(ready_.size()); }  // issued, not yet taken
  // The oldest issued batch, ready for work issued to `consumer` from now on, and its tag.
  Result<std::pair<std::shared_ptr<DeviceBatch>, int64_t>> take(StreamHandle consumer);
  // Drops the owners of host batches whose copies have completed.
  void reap();
  // Waits for every copy, drops every owner, and frees the slots of batches issued and never taken.
  void drain();
  // drain(), then frees the device memory no batch holds and unregisters the registered ranges.
  // Device batches still held stay valid. Idempotent.
  void close();

  int num_slots() const;
  int device_prefetch() const { return options_.device_prefetch; }
  size_t sample_bytes() const { return sample_bytes_; }
  Device& device() { return *device_; }

 private:
  DeviceSlots(std::shared_ptr<Device> device, std::shared_ptr<DeviceRing> ring, size_t sample_bytes,
              DeliveryOptions options);
  // One copy_async, or (`whole` false: registered memory) one per registered range it spans.
  Status copy(void* dst, const void* src, size_t bytes, bool whole);
  // When the memory of a registered range that meets [p, p + bytes) is no longer the memory registered
  // (unmapped, or another mapping in its place): unregisters, after the copies in flight, every range
  // found so.
  Status forget_stale(const void* p, size_t bytes);
  bool wait_for_copies();  // every slot's last copy has completed; false when the device failed
  void unregister_where(uintptr_t lo, uintptr_t hi);  // the ranges that meet [lo, hi), copies done

  std::shared_ptr<Device> device_;
  std::shared_ptr<DeviceRing> ring_;
  size_t sample_bytes_;
  DeliveryOptions options_;
  struct Ready {
    int slot;
    int64_t count;
    int64_t tag;
  };
  std::deque<Ready> ready_;  // issued, not yet taken
  struct Registered {
    size_t bytes;
    Mapping mapping;  // what was mapped there when it was registered
  };
  std::map<uintptr_t, Registered> registered_;  // start -> range
  int64_t stale_ranges_ = 0;
  bool closed_ = false;
};

}  // namespace chute
