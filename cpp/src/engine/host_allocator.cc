#include "chute/engine/host_allocator.h"

#include <sys/mman.h>

#include <bit>
#include <new>
#include <utility>

namespace chute {
namespace {
// Page alignment: the buffers can be pinned (cudaHostRegister) and DMA'd as they are.
constexpr size_t kPage = 4096;

size_t whole_pages(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// Anonymous mappings of their own, marked MADV_WIPEONFORK: a fork (torch DataLoader workers, a
// subprocess) would otherwise share every batch buffer copy-on-write, and the next epoch's writes here would
// then fault and copy each page once more: measured, the first chute epoch after a DataLoader forked its
// workers ran at 667 img/s instead of 1,750. A forked child sees these pages as zeros instead (clone a
// batch a child must read).
class HeapAllocator final : public HostAllocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t length = whole_pages(bytes == 0 ? 1 : bytes);
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_WIPEONFORK
    madvise(p, length, MADV_WIPEONFORK);  // best effort: kernels before 4.14 keep copy-on-write
#endif
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    if (p != nullptr) munmap(p, whole_pages(bytes == 0 ? 1 : bytes));
  }
  bool pinned() const override { return false; }
  std::string name() const override { return "heap"; }
};
}  // namespace

void BlockPool::donate(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_.emplace_back(p, bytes);
}

std::vector<void*> BlockPool::take_returned() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(returned_, {});
}

void* BlockPool::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = ready_.begin(); it != ready_.end(); ++it) {
    if (it->second != bytes) continue;
    void* p = it->first;
    ready_.erase(it);
    return p;
  }
  throw std::bad_alloc();
}

void BlockPool::deallocate(void* p, size_t) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  returned_.push_back(p);
}

size_t BlockPool::footprint(size_t bytes) const { return power_of_two_ ? std::bit_ceil(bytes) : bytes; }

size_t BlockPool::available(size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [p, b] : ready_) n += b == bytes ? 1 : 0;
  return n;
}

void BlockPool::handed_over(void*, size_t) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  ++handed_over_;
}

int64_t BlockPool::handed_over_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return handed_over_;
}

std::shared_ptr<HostAllocator> heap_allocator() {
  static const std::shared_ptr<HostAllocator> heap = std::make_shared<HeapAllocator>();
  return heap;
}

}  // namespace chute
