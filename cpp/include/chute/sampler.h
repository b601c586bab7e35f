// EpochOrder: the order in which an epoch visits a source's samples.
//
// Sequential, or a permutation that depends only on (seed, epoch): a Fisher-Yates shuffle driven by the
// counter-based generator, so every rank and every thread count computes the same order.
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <vector>

namespace chute {

class EpochOrder {
 public:
  EpochOrder(int64_t size, bool shuffle, uint64_t seed, uint64_t epoch);
  int64_t size() const { return size_; }
  // The source index of the epoch's k-th sample.
  int64_t operator[](int64_t k) const { return shuffled_ ? perm_[k] : k; }

 private:
  int64_t size_;
  bool shuffled_;
  std::vector<int64_t> perm_;
};

}  // namespace chute
