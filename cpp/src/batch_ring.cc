#include "chute/batch_ring.h"

#include <algorithm>
#include <new>

#include "chute/status.h"

namespace chute {
namespace {
// Page alignment: the buffers can be pinned (cudaHostRegister) and DMA'd as they are.
constexpr size_t kAlignment = 4096;

void* allocate(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

BatchRing::BatchRing(int64_t batch_size, size_t sample_bytes, int initial_slots, size_t max_bytes)
    : batch_size_(batch_size), sample_bytes_(sample_bytes),
      max_bytes_(std::max(max_bytes, slot_bytes() * static_cast<size_t>(initial_slots))) {
  CHUTE_CHECK(batch_size > 0 && sample_bytes > 0 && initial_slots > 0);
  for (int i = 0; i < initial_slots; ++i) free_.push_back(grow());
}

int BatchRing::grow() {
  Slot s;
  s.images.reset(static_cast<uint8_t*>(allocate(sample_bytes_ * batch_size_)));
  s.labels.reset(static_cast<int64_t*>(allocate(sizeof(int64_t) * batch_size_)));
  slots_.push_back(std::move(s));
  return static_cast<int>(slots_.size()) - 1;
}

int BatchRing::acquire() {
  if (closed_) return -1;
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  return can_grow() ? grow() : -1;
}

void BatchRing::release(int slot) {
  CHUTE_CHECK(slot >= 0 && slot < num_slots());
  CHUTE_CHECK(std::find(free_.begin(), free_.end(), slot) == free_.end());  // released twice: a bug
  if (closed_) slots_[slot] = Slot{};
  free_.push_back(slot);
}

void BatchRing::close() {
  closed_ = true;
  for (int slot : free_) slots_[slot] = Slot{};
}

}  // namespace chute
