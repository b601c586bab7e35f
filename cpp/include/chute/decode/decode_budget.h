// DecodeBudget: admission of large decodes against the loader's memory budget (max_memory).
//
// A worker's decode scratch (the file's bytes, the decoded window, its upright copy, the resampler's rows)
// is small for a typical photo but not for a 14000x14000 PNG, which needs 560 MB whatever its file size.
// A sample whose scratch would exceed kUnchargedDecodeBytes asks the budget first: it is admitted when
// its bytes fit beside the batch buffers (reserved()) and the other large decodes in flight, or when no
// other large decode is in flight (so that an image larger than the whole budget still decodes, alone).
// The worker frees that scratch before its lease ends. Memory for decoding then stays within
// max_memory, plus up to kUnchargedDecodeBytes per worker, plus at most one image that alone does not fit.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace chute {

// Scratch a worker may use, and keep between samples, without asking the budget.
inline constexpr size_t kUnchargedDecodeBytes = size_t{16} << 20;

class DecodeBudget {
 public:
  explicit DecodeBudget(size_t capacity) : capacity_(capacity) {}
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // Bytes held for admitted decodes until destroyed (movable, not copyable).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) { other.budget_ = nullptr; }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { release(); }
    void release();
    size_t bytes() const { return budget_ ? bytes_ : 0; }

   private:
    friend class DecodeBudget;
    Lease(DecodeBudget* budget, size_t bytes) : budget_(budget), bytes_(bytes) {}
    DecodeBudget* budget_ = nullptr;
    size_t bytes_ = 0;
  };

  // Waits until `bytes` may be used (see above); returns the lease that holds them.
  Lease acquire(size_t bytes);
  // Bytes of the budget taken by something else (the batch buffers); admissions wait until it shrinks.
  void set_reserved(size_t bytes);

  size_t capacity() const { return capacity_; }
  size_t reserved() const;
  size_t in_use() const;       // leased now
  size_t peak_in_use() const;  // the most ever leased at once
  int64_t waits() const;       // admissions that had to wait

 private:
  void give_back(size_t bytes);
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t reserved_ = 0;
  size_t used_ = 0;
  int holders_ = 0;
  size_t peak_ = 0;
  int64_t waits_ = 0;
};

}  // namespace chute
