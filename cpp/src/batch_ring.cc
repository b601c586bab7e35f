#include "chute/batch_ring.h"

#include <algorithm>
#include <limits>
#include <string>

#include "chute/status.h"

namespace chute {

BatchRing::BatchRing(int64_t batch_size, size_t sample_bytes, int initial_slots, size_t max_bytes,
                     std::shared_ptr<HostAllocator> allocator)
    : allocator_(allocator ? std::move(allocator) : heap_allocator()), batch_size_(batch_size),
      sample_bytes_(sample_bytes),
      max_bytes_(std::max(max_bytes, slot_bytes() * static_cast<size_t>(initial_slots))) {
  CHUTE_CHECK(batch_size > 0 && sample_bytes > 0 && initial_slots > 0);
  for (int i = 0; i < initial_slots; ++i) free_.push_back(grow());
}

Status BatchRing::check_size(int64_t batch_size, size_t sample_bytes, int64_t initial_slots) {
  size_t per_sample = 0, slot = 0;
  if (batch_size <= 0 || __builtin_add_overflow(sample_bytes, sizeof(int64_t), &per_sample) ||
      __builtin_mul_overflow(per_sample, static_cast<uint64_t>(batch_size), &slot))
    return invalid_argument("a batch of " + std::to_string(batch_size) + " samples of " + std::to_string(sample_bytes) +
                            " bytes is too large to address (over 2**64 bytes): lower batch_size");
  size_t ring = 0;
  if (initial_slots > std::numeric_limits<int>::max() ||
      __builtin_mul_overflow(slot, static_cast<uint64_t>(initial_slots), &ring))
    return invalid_argument("a ring of " + std::to_string(initial_slots) + " batch buffers of " + std::to_string(slot) +
                            " bytes each is too large to address (over 2**64 bytes or 2**31 buffers): lower "
                            "prefetch, batch_size or the output size");
  return Status::ok();
}

BatchRing::Slot BatchRing::make_slot() {
  Slot s;
  s.images = Buffer(allocator_.get(), sample_bytes_ * batch_size_);
  s.labels = Buffer(allocator_.get(), sizeof(int64_t) * batch_size_);
  return s;
}

int BatchRing::grow() {
  slots_.push_back(make_slot());
  return static_cast<int>(slots_.size()) - 1;
}

int BatchRing::acquire() {
  if (closed_) return -1;
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (!can_grow()) return -1;
  if (empty_.empty()) return grow();
  const int slot = empty_.back();
  slots_[slot] = make_slot();  // may throw bad_alloc: the slot stays empty
  empty_.pop_back();
  return slot;
}

void BatchRing::trim(int keep) {
  while (num_slots() > keep && !free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    slots_[slot] = Slot{};
    empty_.push_back(slot);
  }
}

void BatchRing::release(int slot) {
  CHUTE_CHECK(slot >= 0 && slot < static_cast<int>(slots_.size()) && slots_[slot].images.data != nullptr);
  CHUTE_CHECK(std::find(free_.begin(), free_.end(), slot) == free_.end());  // released twice: a bug
  if (closed_) slots_[slot] = Slot{};
  free_.push_back(slot);
}

void BatchRing::close() {
  closed_ = true;
  for (int slot : free_) slots_[slot] = Slot{};
}

}  // namespace chute
