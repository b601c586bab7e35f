// PageBuffer and BufferPool: memory that is allocated once and written again and again.
//
// Why: on a VM whose guest hands freed memory back to its host (virtio-balloon free page reporting), the
// first touch of a newly allocated page faults to the host; writing each downloaded byte into a fresh page
// costs several times the download itself (docs/REMOTE.md, measured). A buffer taken from a pool was
// touched before: writing it again costs only the copy. Remote shards are received into such buffers and
// read from there (io/shard_stream.h); nothing is returned to the kernel while the pool lives.
//
// PageBuffer: page-aligned anonymous memory (mmap), whole pages, owned (RAII). Page alignment also makes
// it a valid O_DIRECT buffer.
// BufferPool: buffers of one capacity, at most limit() of them allocated at once; a buffer given back is
// kept for the next taker while within the limit, and unmapped beyond it (a lowered limit shrinks the pool
// as buffers come back). The memory a pool holds is at most limit() * buffer_bytes().
// Thread-safety: a PageBuffer belongs to one owner; every BufferPool method may be called from any thread
// (the release of a Lease too, from whichever thread drops the last reference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "chute/base/status.h"

namespace chute {

class PageBuffer {
 public:
  // `bytes` rounded up to whole pages (at least one); kEnvironment naming the size when mmap refuses.
  static Result<PageBuffer> allocate(size_t bytes);
  PageBuffer() = default;
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  std::span<uint8_t> span() const { return {data_, capacity_}; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // `buffer_bytes` (rounded up to pages) each, at most `limit` (>= 1) at once. `on_return` (may be empty)
  // runs after a buffer comes back, on the thread that gave it back, with no lock of the pool held: a
  // taker waiting for a buffer wakes up there.
  static std::shared_ptr<BufferPool> create(size_t buffer_bytes, int limit, std::function<void()> on_return = {});

  // A buffer, back in the pool when the last copy of the pointer goes: a kept one, or a new one while fewer
  // than limit() are out. nullptr when limit() buffers are out; kEnvironment when mmap refuses a new one.
  Result<std::shared_ptr<PageBuffer>> try_take();
  void set_limit(int limit);  // >= 1

  size_t buffer_bytes() const { return buffer_bytes_; }
  int limit() const;
  int allocated() const;  // buffers that exist: out, or kept for reuse
  int out() const;        // buffers handed out and not yet back

 private:
  BufferPool(size_t buffer_bytes, int limit, std::function<void()> on_return)
      : buffer_bytes_(buffer_bytes), limit_(limit), on_return_(std::move(on_return)) {}
  void give_back(PageBuffer buffer);

  const size_t buffer_bytes_;
  mutable std::mutex mu_;
  int limit_;                     // guarded by mu_
  int out_ = 0;                   // guarded by mu_
  std::vector<PageBuffer> kept_;  // guarded by mu_
  const std::function<void()> on_return_;
};

}  // namespace chute
