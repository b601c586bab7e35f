// HostAllocator: where the batch ring's buffers come from. The default is the plain heap (page-aligned);
// a Device supplies pinned (page-locked) memory, so that batches decoded into the ring can be copied to a
// GPU by DMA without a staging copy, and so that a user's own tensor.to("cuda", non_blocking=True) is
// truly asynchronous.
//
// Thread-safety: allocate() and deallocate() may be called from any thread, concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
  // The memory an allocation of `bytes` really holds, which is what max_memory counts: more than `bytes`
  // where the memory comes in rounded blocks (a BlockPool of torch's pinned blocks).
  virtual size_t footprint(size_t bytes) const { return bytes; }

  // Hand-over allocators (BlockPool): memory delivered to the consumer becomes the consumer's, and the
  // ring takes a new block for the slot. The others are asked for memory only when the ring grows.
  virtual bool hands_over() const { return false; }
  // Whether allocate(bytes) would succeed now without waiting (a BlockPool may be empty), and how many
  // blocks of `bytes` it holds ready.
  virtual bool can_allocate(size_t /*bytes*/) const { return true; }
  virtual size_t available(size_t /*bytes*/) const { return 0; }
  // The ring gave the block to the consumer with its batch (only when hands_over()).
  virtual void handed_over(void* /*p*/, size_t /*bytes*/) noexcept {}
};

// Page-aligned anonymous mappings (mmap, marked MADV_WIPEONFORK so a fork does not share them): the default.
std::shared_ptr<HostAllocator> heap_allocator();

// BlockPool: pinned blocks lent by the consumer's framework (for torch: torch.empty(n, pin_memory=True),
// i.e. torch's caching host allocator) for the ring to fill, one batch each. A delivered block is handed
// over: it leaves the ring with its batch, the consumer's tensors own it, and the framework, which records
// an event on every stream that copies out of it, decides when it can be lent again. chute never writes a
// block after its hand-over, so no reuse can race a copy, whatever stream the copy ran on.
//
// The lender keeps the pool stocked (donate()), and drops its reference to each block the ring gave back
// unused (take_returned()): at close(), or when the ring is destroyed.
//
// `power_of_two_blocks`: the lender's blocks are rounded up to a power of two, as torch's caching host
// allocator rounds every request (so that a freed block serves any request of its size class): a batch
// buffer of 19.3 MB then holds a 32 MiB block, and footprint() says so.
class BlockPool final : public HostAllocator {
 public:
  explicit BlockPool(std::string name = "consumer pinned blocks", bool power_of_two_blocks = false)
      : name_(std::move(name)), power_of_two_(power_of_two_blocks) {}
  void donate(void* p, size_t bytes);
  std::vector<void*> take_returned();

  void* allocate(size_t bytes) override;  // throws std::bad_alloc when no block of `bytes` was donated
  void deallocate(void* p, size_t bytes) noexcept override;
  bool pinned() const override { return true; }
  std::string name() const override { return name_; }
  bool hands_over() const override { return true; }
  size_t footprint(size_t bytes) const override;
  bool can_allocate(size_t bytes) const override { return available(bytes) > 0; }
  size_t available(size_t bytes) const override;
  void handed_over(void* p, size_t bytes) noexcept override;
  int64_t handed_over_count() const;

 private:
  const std::string name_;
  const bool power_of_two_;
  mutable std::mutex mu_;
  std::vector<std::pair<void*, size_t>> ready_;  // donated, not yet in the ring
  std::vector<void*> returned_;                  // given back by the ring, unused
  int64_t handed_over_ = 0;
};

}  // namespace chute
