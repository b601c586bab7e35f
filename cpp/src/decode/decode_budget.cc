#include "chute/decode/decode_budget.h"

#include <algorithm>

#include "chute/base/fork_gate.h"

namespace chute {

DecodeBudget::Lease& DecodeBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    other.budget_ = nullptr;
  }
  return *this;
}

void DecodeBudget::Lease::release() {
  if (budget_ != nullptr) budget_->give_back(bytes_);
  budget_ = nullptr;
}

DecodeBudget::Lease DecodeBudget::acquire(size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  // Fits beside the batch buffers and the decodes in flight, or runs alone: an admission never waits for
  // something that cannot end, since every holder only decodes and then gives its bytes back.
  auto fits = [&] { return holders_ == 0 || (reserved_ <= capacity_ && used_ + bytes <= capacity_ - reserved_); };
  if (!fits()) {
    ++waits_;
    const ForkGate::Pause pause;  // waits for other decodes to end: a fork need not wait for this one
    cv_.wait(lock, fits);
  }
  used_ += bytes;
  ++holders_;
  peak_ = std::max(peak_, used_);
  return Lease(this, bytes);
}

void DecodeBudget::give_back(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    used_ -= bytes;
    --holders_;
  }
  cv_.notify_all();
}

void DecodeBudget::set_reserved(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ = bytes;
  }
  cv_.notify_all();
}

size_t DecodeBudget::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

size_t DecodeBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

size_t DecodeBudget::peak_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

int64_t DecodeBudget::waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_;
}

}  // namespace chute
