// BatchRing: reusable batch buffers. Each slot holds one batch (images and labels) and cycles
// free -> filling -> ready -> held by the consumer -> free. Memory is allocated once per slot and reused;
// the ring grows only when the consumer holds more batches than it was sized for, up to a byte budget.
//
// Thread-safety: none of its own. Its owner (the loader's shared state) guards it with one mutex, because
// a slot's return must wake the threads that wait for one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace chute {

class BatchRing {
 public:
  BatchRing(int64_t batch_size, size_t sample_bytes, int initial_slots, size_t max_bytes);

  // A free slot, allocating a new one when none is free and the budget allows; -1 when neither.
  int acquire();
  void release(int slot);
  // For an owner that is done (a closed loader): frees the memory of every free slot now, and of every
  // slot released from now on. Nothing can be acquired after it.
  void close();
  bool can_acquire() const { return !closed_ && (!free_.empty() || can_grow()); }

  uint8_t* images(int slot) const { return slots_[slot].images.get(); }
  int64_t* labels(int slot) const { return slots_[slot].labels.get(); }
  size_t sample_bytes() const { return sample_bytes_; }
  int64_t batch_size() const { return batch_size_; }
  int num_slots() const { return static_cast<int>(slots_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  size_t slot_bytes() const { return sample_bytes_ * batch_size_ + sizeof(int64_t) * batch_size_; }

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  struct Slot {
    std::unique_ptr<uint8_t, FreeDeleter> images;
    std::unique_ptr<int64_t, FreeDeleter> labels;
  };
  bool can_grow() const { return (slots_.size() + 1) * slot_bytes() <= max_bytes_; }
  int grow();

  int64_t batch_size_;
  size_t sample_bytes_;
  size_t max_bytes_;
  bool closed_ = false;
  std::vector<Slot> slots_;
  std::vector<int> free_;
};

}  // namespace chute
