// BatchRing: reusable batch buffers. Each slot holds one batch (images and labels) and cycles
// free -> filling -> ready -> held by the consumer -> free. Memory is allocated once per slot and reused;
// the ring grows only when the consumer holds more batches than it was sized for, up to a byte budget.
//
// The memory comes from a HostAllocator (host_allocator.h): the heap, or pinned memory for GPU delivery.
//
// Thread-safety: none of its own. Its owner (the loader's shared state) guards it with one mutex, because
// a slot's return must wake the threads that wait for one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "chute/host_allocator.h"
#include "chute/status.h"

namespace chute {

class BatchRing {
 public:
  BatchRing(int64_t batch_size, size_t sample_bytes, int initial_slots, size_t max_bytes,
            std::shared_ptr<HostAllocator> allocator = heap_allocator());
  // Whether a ring of `initial_slots` batch buffers of `batch_size` samples of `sample_bytes` can be
  // addressed: the slot count fits an int and no byte count overflows (an overflow would allocate less
  // than is written). Whether the memory is there is the allocator's business.
  static Status check_size(int64_t batch_size, size_t sample_bytes, int64_t initial_slots);

  // A free slot, allocating a new one when none is free and the budget allows; -1 when neither.
  int acquire();
  void release(int slot);
  // Frees the memory of free slots until at most `keep` slots hold memory: the ring shrinks back once a
  // consumer that kept many batches lets them go. Slot numbers stay valid; a trimmed slot gets memory
  // again when acquired.
  void trim(int keep);
  // For an owner that is done (a closed loader): frees the memory of every free slot now, and of every
  // slot released from now on. Nothing can be acquired after it.
  void close();
  bool can_acquire() const { return !closed_ && (!free_.empty() || can_grow()); }

  uint8_t* images(int slot) const { return static_cast<uint8_t*>(slots_[slot].images.data); }
  int64_t* labels(int slot) const { return static_cast<int64_t*>(slots_[slot].labels.data); }
  const HostAllocator& allocator() const { return *allocator_; }
  size_t sample_bytes() const { return sample_bytes_; }
  int64_t batch_size() const { return batch_size_; }
  int num_slots() const { return static_cast<int>(slots_.size() - empty_.size()); }  // slots holding memory
  int num_free() const { return static_cast<int>(free_.size()); }
  int max_slots() const { return static_cast<int>(max_bytes_ / slot_bytes()); }  // what the budget allows
  size_t slot_bytes() const { return sample_bytes_ * batch_size_ + sizeof(int64_t) * batch_size_; }

 private:
  // Returns its memory to the allocator it came from.
  struct Buffer {
    HostAllocator* allocator = nullptr;  // the ring's, which outlives its slots
    void* data = nullptr;
    size_t bytes = 0;
    Buffer() = default;
    Buffer(HostAllocator* a, size_t n) : allocator(a), data(a->allocate(n)), bytes(n) {}
    Buffer(Buffer&& o) noexcept : allocator(o.allocator), data(o.data), bytes(o.bytes) { o.data = nullptr; }
    Buffer& operator=(Buffer&& o) noexcept {
      if (this != &o) {
        reset();
        allocator = o.allocator, data = o.data, bytes = o.bytes;
        o.data = nullptr;
      }
      return *this;
    }
    ~Buffer() { reset(); }
    void reset() {
      if (data != nullptr) allocator->deallocate(data, bytes);
      data = nullptr;
    }
  };
  struct Slot {
    Buffer images;
    Buffer labels;
  };
  bool can_grow() const { return (static_cast<size_t>(num_slots()) + 1) * slot_bytes() <= max_bytes_; }
  Slot make_slot();
  int grow();

  std::shared_ptr<HostAllocator> allocator_;  // before slots_: destroyed after them
  int64_t batch_size_;
  size_t sample_bytes_;
  size_t max_bytes_;
  bool closed_ = false;
  std::vector<Slot> slots_;
  std::vector<int> free_;   // slots holding memory, not in use
  std::vector<int> empty_;  // slots whose memory trim() freed
};

}  // namespace chute
