// BatchRing: reusable batch buffers. Each slot holds one batch (images and labels) and cycles
// free -> filling -> ready -> held by the consumer -> free. Memory is allocated once per slot and reused;
// the ring grows only when the consumer holds more batches than it was sized for, up to a byte budget.
//
// The memory comes from a HostAllocator (host_allocator.h): the heap, or pinned memory for GPU delivery.
// One allocation per slot: images, then labels (at labels_offset()).
//
// Hand-over: with an allocator whose hands_over() is true (a BlockPool of the consumer's framework, e.g.
// torch's caching host allocator), a delivered slot's memory becomes the consumer's (release(slot, true))
// and the ring never touches it again; the slot takes a fresh block from the allocator before it is
// filled again. The framework, which sees the consumer's copies, decides when a block may be reused. A
// slot may therefore be free without memory, and acquire() then fails until the allocator has a block.
//
// Thread-safety: none of its own. Its owner (the loader's shared state) guards it with one mutex, because
// a slot's return must wake the threads that wait for one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "chute/base/status.h"
#include "chute/engine/host_allocator.h"

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

  // Growth without the owner's lock held during the allocation (cudaHostAlloc can take milliseconds, and
  // pins pages): under the lock, wants_growth() and begin_growth(); without it, allocate_slot(); under it
  // again, finish_growth() adds the slot, or abandon_growth() after a failed allocation (then the ring
  // stops growing). While a growth is under way can_acquire() is false unless a slot is free, so other
  // threads wait for it instead of allocating too; growing() tells the owner one is coming.
  bool wants_growth() const;
  void begin_growth() { growing_ = true; }
  bool growing() const { return growing_; }
  // A slot's memory: returns it to the allocator it came from.
  class Buffer {
   public:
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
    void forget() { data = nullptr; }  // the memory is someone else's now
    void reset() {
      if (data != nullptr) allocator->deallocate(data, bytes);
      data = nullptr;
    }
  };
  Buffer allocate_slot() const;  // thread-safe: touches only the allocator
  int finish_growth(Buffer memory);
  void abandon_growth();

  // Memory the ring no longer needs (a closed ring's slots), kept for the owner to free after it released
  // its lock: cudaFreeHost synchronises the device.
  std::vector<Buffer> take_retired();
  // `handed_over`: the slot's memory now belongs to the consumer (see above); the ring forgets it.
  void release(int slot, bool handed_over = false);
  // Retires the memory of free slots until at most `keep` slots hold memory: the ring shrinks back once a
  // consumer that kept many batches lets them go. The owner frees what take_retired() returns after
  // releasing its lock. Slot numbers stay valid; a trimmed slot gets memory again when acquired.
  void trim(int keep);
  // For an owner that is done (a closed loader): frees the memory of every free slot now, and of every
  // slot released from now on. Nothing can be acquired after it.
  void close();
  bool can_acquire() const;
  // Blocks the allocator would need now so that every free slot has memory and the ring can grow once.
  int memory_wanted() const;

  uint8_t* images(int slot) const { return static_cast<uint8_t*>(slots_[slot].memory.data); }
  int64_t* labels(int slot) const {
    void* p = slots_[slot].memory.data;
    return p == nullptr ? nullptr : reinterpret_cast<int64_t*>(static_cast<uint8_t*>(p) + labels_offset());
  }
  const HostAllocator& allocator() const { return *allocator_; }
  size_t sample_bytes() const { return sample_bytes_; }
  int64_t batch_size() const { return batch_size_; }
  int num_slots() const { return static_cast<int>(slots_.size()); }  // with or without memory
  int slots_with_memory() const;
  int max_slots() const { return static_cast<int>(max_bytes_ / slot_footprint()); }  // what the budget allows
  int num_free() const { return static_cast<int>(free_.size()); }
  size_t labels_offset() const { return (sample_bytes_ * batch_size_ + 63) / 64 * 64; }
  size_t slot_bytes() const { return labels_offset() + sizeof(int64_t) * batch_size_; }
  // The memory one slot's buffer really holds (HostAllocator::footprint): what the byte budget counts.
  size_t slot_footprint() const { return allocator_->footprint(slot_bytes()); }

 private:
  struct Slot {
    Buffer memory;  // empty: a slot whose memory was handed over, or of a closed ring
  };
  bool can_grow() const { return !growth_failed_ && (slots_.size() + 1) * slot_footprint() <= max_bytes_; }
  bool can_allocate() const { return allocator_->can_allocate(slot_bytes()); }
  int free_with_memory() const;  // the index in free_ of the most recently freed slot with memory, or -1
  int grow();                    // a new slot, with memory if the allocator has some

  std::shared_ptr<HostAllocator> allocator_;  // before slots_: destroyed after them
  int64_t batch_size_;
  size_t sample_bytes_;
  size_t max_bytes_;
  bool closed_ = false;
  bool growing_ = false;
  bool growth_failed_ = false;
  std::vector<Buffer> retired_;
  std::vector<Slot> slots_;
  std::vector<int> free_;
};

}  // namespace chute
