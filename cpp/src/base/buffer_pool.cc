#include "chute/base/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace chute {

Result<PageBuffer> PageBuffer::allocate(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t capacity = bytes == 0 ? page : (bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return environment_error("cannot allocate a buffer of " + std::to_string(capacity) +
                             " bytes: " + std::strerror(errno));
  PageBuffer b;
  b.data_ = static_cast<uint8_t*>(p);
  b.capacity_ = capacity;
  return b;
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, capacity_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

PageBuffer::~PageBuffer() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

std::shared_ptr<BufferPool> BufferPool::create(size_t buffer_bytes, int limit, std::function<void()> on_return) {
  return std::shared_ptr<BufferPool>(new BufferPool(buffer_bytes, limit < 1 ? 1 : limit, std::move(on_return)));
}

Result<std::shared_ptr<PageBuffer>> BufferPool::try_take() {
  PageBuffer buffer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kept_.empty()) {
      buffer = std::move(kept_.back());
      kept_.pop_back();
    } else if (out_ >= limit_) {
      return std::shared_ptr<PageBuffer>();
    }
    ++out_;  // counted before a new one is mapped, so that no other taker goes past the limit meanwhile
  }
  if (buffer.data() == nullptr) {
    Result<PageBuffer> made = PageBuffer::allocate(buffer_bytes_);
    if (!made.is_ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      --out_;
      return made.status();
    }
    buffer = std::move(made).value();
  }
  // The deleter keeps the pool alive until its last buffer is back.
  auto self = shared_from_this();
  auto* held = new PageBuffer(std::move(buffer));
  return std::shared_ptr<PageBuffer>(held, [self](PageBuffer* b) {
    self->give_back(std::move(*b));
    delete b;
  });
}

void BufferPool::give_back(PageBuffer buffer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --out_;
    if (out_ + static_cast<int>(kept_.size()) < limit_) kept_.push_back(std::move(buffer));
  }
  // A buffer beyond the limit is unmapped here, without the lock (buffer's destructor).
  if (on_return_) on_return_();
}

void BufferPool::set_limit(int limit) {
  std::vector<PageBuffer> extra;
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = limit < 1 ? 1 : limit;
  while (!kept_.empty() && out_ + static_cast<int>(kept_.size()) > limit_) {
    extra.push_back(std::move(kept_.back()));
    kept_.pop_back();
  }
}

int BufferPool::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

int BufferPool::allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return out_ + static_cast<int>(kept_.size());
}

int BufferPool::out() const {
  std::lock_guard<std::mutex> lock(mu_);
  return out_;
}

}  // namespace chute
