// EpochOrder: which source samples this rank visits in an epoch, in what order.
//
// The epoch's global order is sequential, or a pseudo-random permutation of [0, N) that depends only on
// (seed, epoch): a keyed Feistel network on the next even power of two, cycle-walked back into [0, N).
// It is computed per position in O(1) time and memory, so 10M+ samples cost no table.
//
// Ranks take interleaved positions of that order, rank r the global positions r, r + W, r + 2W, ...
// With even_split (training), every rank gets floor(N / W) samples: the last N mod W positions of the
// epoch (different samples each shuffled epoch) are left out, so all ranks run the same number of steps
// and DDP never waits on a rank that has one more batch. Without it (exact evaluation), positions run to
// the end: every sample is visited exactly once, and ranks differ by at most one sample.
// An explicit order (the second constructor) is a given list of source indices instead: the order a
// caller's own sampler chose (chute.DataLoader's fast paths feed torch's samplers through it). It is
// visited as given, by this process alone: sharding is the caller's sampler's business then.
// Thread-safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "chute/status.h"

namespace chute {

// A keyed bijection of [0, n).
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t seed, uint64_t epoch);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_;
  int half_bits_ = 0;
  uint64_t mask_ = 0;
  std::array<uint64_t, 4> keys_{};
};

struct Shard {
  int64_t rank = 0;
  int64_t world_size = 1;
  bool even_split = true;
};

class EpochOrder {
 public:
  EpochOrder(int64_t dataset_size, bool shuffle, uint64_t seed, uint64_t epoch, Shard shard = {});
  // Exactly these source indices, in this order (the caller checks they are inside the source).
  explicit EpochOrder(std::vector<int64_t> indices);
  // Samples this rank visits this epoch.
  int64_t size() const { return size_; }
  // The source index of this rank's k-th sample.
  int64_t operator[](int64_t k) const {
    if (explicit_) return (*explicit_)[static_cast<size_t>(k)];
    const uint64_t global = static_cast<uint64_t>(k) * shard_.world_size + shard_.rank;
    return static_cast<int64_t>(shuffle_ ? permutation_(global) : global);
  }
  // Samples a rank visits, for a dataset of n samples.
  static int64_t rank_size(int64_t n, const Shard& shard);
  // Whether `shard` can split a dataset of n samples: rank in [0, world_size), and with even_split at
  // least one sample per rank (otherwise every rank would get none, silently).
  static Status check_shard(int64_t n, const Shard& shard);

 private:
  int64_t size_;
  bool shuffle_;
  Shard shard_;
  Permutation permutation_;
  std::shared_ptr<const std::vector<int64_t>> explicit_;  // set: an explicit order
};

}  // namespace chute
