#include "chute/host_allocator.h"

#include <cstdlib>
#include <new>

namespace chute {
namespace {
// Page alignment: the buffers can be pinned (cudaHostRegister) and DMA'd as they are.
constexpr size_t kPage = 4096;

class HeapAllocator final : public HostAllocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { std::free(p); }
  bool pinned() const override { return false; }
  std::string name() const override { return "heap"; }
};
}  // namespace

std::shared_ptr<HostAllocator> heap_allocator() {
  static const std::shared_ptr<HostAllocator> heap = std::make_shared<HeapAllocator>();
  return heap;
}

}  // namespace chute
