// EpochRemainder: what an interrupted epoch has left to deliver, after its ranks (of one world size, then
// maybe of others) received part of it: the elastic resume of docs/ORDER.md.
//
// An epoch's global order has positions [0, N) (sampler.h). A world of W ranks splits a list of positions
// as EpochOrder splits a whole epoch: interleaved (the sample order: rank r takes list places r, r + W, ...)
// or in contiguous blocks (the shard-window order), each rank rank_size(L, shard) places of the list's L,
// the last L mod W left out under even_split. The first world splits the whole order [0, N); rank r's
// consumer received the first received[r] places of its share. What no rank received, of the places the
// ranks were given, is the remainder: a list of positions, in increasing order (the global order's own).
// A next world (a restart on another number of ranks) splits the remainder in the same way, and so on:
// every split is an EpochSplit, and EpochOrder (sampler.h) gives a rank its share of the last remainder.
//
// So the samples an interrupted epoch delivers after a restart are exactly those its old ranks had not
// received, each once, and only those: across any number of restarts, whatever the world sizes. Under
// even_split each world leaves out the last L mod W places of its list (fewer than W samples), as every
// even_split epoch does, so that all its ranks get the same number of samples and DDP steps.
//
// The remainder is held as runs of consecutive positions: when the ranks of a world received equal counts
// (DDP ranks step together) it is one run per rank at most, whatever N; its cost grows only with how far
// apart the ranks' counts are (at most the places between the least and the most received).
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "chute/base/status.h"

namespace chute {

// One world's split of (what was left of) an epoch, and how far each of its ranks got.
struct EpochSplit {
  int64_t world_size = 1;
  std::vector<int64_t> received;  // per rank, in rank order: samples of its share its consumer received
};

class EpochRemainder {
 public:
  // The positions of an epoch of `n` global positions left after `splits`, in order; `contiguous`: ranks
  // take contiguous blocks (the shard-window order), else interleaved places (the sample order).
  // kInvalidArgument when a split has world_size < 1, a received list of another length, or a count
  // outside [0, that rank's share]; the message names the split and the rank.
  static Result<std::shared_ptr<const EpochRemainder>> create(int64_t n, bool contiguous, bool even_split,
                                                              const std::vector<EpochSplit>& splits);
  // Positions left.
  int64_t size() const { return starts_.back(); }
  // The global position of the i-th position left, i in [0, size()): a binary search over the runs.
  int64_t operator()(int64_t i) const;
  // Runs of consecutive positions (what it costs).
  int64_t runs() const { return static_cast<int64_t>(first_.size()); }
  // What it was made for: an epoch of epoch_size() positions, split contiguously or interleaved.
  int64_t epoch_size() const { return n_; }
  bool contiguous() const { return contiguous_; }

 private:
  EpochRemainder() = default;
  int64_t n_ = 0;
  bool contiguous_ = false;
  std::vector<int64_t> starts_{0};  // run j covers list places [starts_[j], starts_[j + 1])
  std::vector<int64_t> first_;      // run j's first global position
};

}  // namespace chute
