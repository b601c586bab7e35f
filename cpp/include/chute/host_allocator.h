// HostAllocator: where the batch ring's buffers come from. The default is the plain heap (page-aligned);
// a Device supplies pinned (page-locked) memory, so that batches decoded into the ring can be copied to a
// GPU by DMA without a staging copy, and so that a user's own tensor.to("cuda", non_blocking=True) is
// truly asynchronous.
//
// Thread-safety: allocate() and deallocate() may be called from any thread, concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace chute {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // Page-aligned memory of at least `bytes`. Throws std::bad_alloc when none can be had at all; an
  // allocator that cannot pin may hand out pageable memory instead (and say so once on stderr).
  virtual void* allocate(size_t bytes) = 0;
  // `bytes` is what was passed to allocate().
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // Whether allocate() returns page-locked memory (a DMA source).
  virtual bool pinned() const = 0;
  virtual std::string name() const = 0;
};

// Page-aligned heap memory (aligned_alloc): the default.
std::shared_ptr<HostAllocator> heap_allocator();

}  // namespace chute
