#include "chute/engine/batch_ring.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "chute/base/status.h"

namespace chute {

BatchRing::BatchRing(int64_t batch_size, size_t sample_bytes, int initial_slots, size_t max_bytes,
                     std::shared_ptr<HostAllocator> allocator)
    : allocator_(allocator ? std::move(allocator) : heap_allocator()),
      batch_size_(batch_size),
      sample_bytes_(sample_bytes),
      max_bytes_(std::max(max_bytes, slot_footprint() * static_cast<size_t>(initial_slots))) {
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

int BatchRing::grow() {
  Slot s;
  if (can_allocate()) s.memory = Buffer(allocator_.get(), slot_bytes());
  slots_.push_back(std::move(s));
  return static_cast<int>(slots_.size()) - 1;
}

int BatchRing::free_with_memory() const {
  for (int i = static_cast<int>(free_.size()) - 1; i >= 0; --i)
    if (slots_[free_[i]].memory.data != nullptr) return i;
  return -1;
}

bool BatchRing::can_acquire() const {
  if (closed_) return false;
  return free_with_memory() >= 0 || ((!free_.empty() || (!growing_ && can_grow())) && can_allocate());
}

bool BatchRing::wants_growth() const { return !closed_ && !growing_ && free_.empty() && can_grow() && can_allocate(); }

BatchRing::Buffer BatchRing::allocate_slot() const { return Buffer(allocator_.get(), slot_bytes()); }

int BatchRing::finish_growth(Buffer memory) {
  growing_ = false;
  if (closed_) {
    retired_.push_back(std::move(memory));
    return -1;
  }
  slots_.push_back(Slot{std::move(memory)});
  const int slot = static_cast<int>(slots_.size()) - 1;
  free_.push_back(slot);
  return slot;
}

void BatchRing::abandon_growth() {
  growing_ = false;
  growth_failed_ = true;  // the allocator said no: the ring stays as it is
}

std::vector<BatchRing::Buffer> BatchRing::take_retired() { return std::exchange(retired_, {}); }

int BatchRing::memory_wanted() const {
  if (closed_ || !allocator_->hands_over()) return 0;
  int wanted = can_grow() ? 1 : 0;
  for (int slot : free_) wanted += slots_[slot].memory.data == nullptr ? 1 : 0;
  return std::max(0, wanted - static_cast<int>(allocator_->available(slot_bytes())));
}

int BatchRing::acquire() {
  if (closed_) return -1;
  // The most recently freed slot first (its memory is likely still in cache).
  if (const int i = free_with_memory(); i >= 0) {
    const int slot = free_[i];
    free_.erase(free_.begin() + i);
    return slot;
  }
  if (!can_allocate()) return -1;
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    slots_[slot].memory = Buffer(allocator_.get(), slot_bytes());
    return slot;
  }
  if (growing_ || !can_grow()) return -1;
  const int slot = grow();
  return slots_[slot].memory.data != nullptr ? slot : (free_.push_back(slot), -1);
}

void BatchRing::release(int slot, bool handed_over) {
  CHUTE_CHECK(slot >= 0 && slot < num_slots());
  CHUTE_CHECK(std::find(free_.begin(), free_.end(), slot) == free_.end());  // released twice: a bug
  Buffer& memory = slots_[slot].memory;
  if (handed_over && memory.data != nullptr) {
    allocator_->handed_over(memory.data, memory.bytes);
    memory.forget();
  }
  if (closed_ && memory.data != nullptr) retired_.push_back(std::move(memory));
  free_.push_back(slot);
}

int BatchRing::slots_with_memory() const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.memory.data; }));
}

void BatchRing::trim(int keep) {
  int with_memory = slots_with_memory();
  // The least recently freed first: the most recent ones are the likeliest to be still in cache.
  for (auto it = free_.begin(); it != free_.end() && with_memory > keep; ++it) {
    Buffer& memory = slots_[*it].memory;
    if (memory.data == nullptr) continue;
    retired_.push_back(std::move(memory));
    --with_memory;
  }
}

void BatchRing::close() {
  closed_ = true;
  for (int slot : free_)
    if (slots_[slot].memory.data != nullptr) retired_.push_back(std::move(slots_[slot].memory));
}

}  // namespace chute
