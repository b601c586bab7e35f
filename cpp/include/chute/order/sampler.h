// EpochOrder: which source samples this rank visits in an epoch, in what order (docs/ORDER.md).
//
// Three kinds:
//
// The sample order. The epoch's global order is sequential, or a pseudo-random permutation of [0, N) that
// depends only on (seed, epoch): a keyed Feistel network on the next even power of two, cycle-walked back
// into [0, N). It is computed per position in O(1) time and memory, so 10M+ samples cost no table.
// Ranks take interleaved positions of that order, rank r the global positions r, r + W, r + 2W, ...
// With even_split (training), every rank gets floor(N / W) samples: the last N mod W positions of the
// epoch (different samples each shuffled epoch) are left out, so all ranks run the same number of steps
// and DDP never waits on a rank that has one more batch. Without it (exact evaluation), positions run to
// the end: every sample is visited exactly once, and ranks differ by at most one sample.
//
// The shard-window order, for sources stored as shards (packed shards, tar files), where a random read
// per sample is slow (remote storage) and whole-shard sequential reads are fast. The source's shards are
// contiguous index ranges (`shard_sizes`, samples per shard in index order). For (seed, epoch):
//   (a) the shard order is shuffled by Permutation(S, seed, epoch, kShardStream, kRounds);
//   (b) the shuffled shard sequence is cut into consecutive windows of K shards (the last may be shorter);
//   (c) within window w, the samples of its shards are shuffled together by
//       Permutation(samples in w, seed, epoch, kWindowStream + w, kRounds); the global order is the windows one
//       after another;
//   (d) ranks take CONTIGUOUS blocks of the global order: rank r the global positions
//       [r * n, (r + 1) * n) with n = N / W under even_split (the last N mod W positions are left out);
//       without it the first N mod W ranks take one more, and every sample is visited exactly once.
// Contiguous here, interleaved in the sample order: a rank then reads about S / W of the shards (its own
// windows, plus at most two windows it shares with its neighbours at its block's ends), so a node fetches 1/W of
// a remote dataset instead of every shard. The sample order has no such locality to keep, and
// interleaving keeps each rank's share a uniform sample of every part of the permutation.
// Consecutive positions draw from at most K shards (two windows' worth at a window boundary).
// Without shuffle, shards and samples stay in index order: the global order is sequential (the ranks'
// blocks are still contiguous). Per position the order costs two binary searches, O(log S) time; an
// epoch's order holds O(S) memory (the shard sequence, prefix sums of its sizes, a key per window), never
// a table of N.
//
// The rest of an interrupted epoch (`rest`, remainder.h): the sample or shard-window order's epoch, of
// which earlier ranks (maybe of another world size) received part. The positions left are split among this
// world's ranks exactly as a whole epoch's positions are (interleaved, or contiguous blocks; even_split
// as above), each rank's k-th place mapped to its position through `rest`, then to its source index.
//
// An explicit order (the last constructor) is a given list of source indices instead: the order a
// caller's own sampler chose (chute.DataLoader's fast paths feed torch's samplers through it). It is
// visited as given, by this process alone: sharding is the caller's sampler's business then.
// Thread-safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "chute/base/status.h"
#include "chute/order/remainder.h"

namespace chute {

// A keyed bijection of [0, n).
// Its round keys come from SampleRng(seed, epoch, UINT64_MAX - stream): counter spaces of their own, apart
// from every sample's augmentation draws (sample indices stay far below). Stream 0 is the sample order's.
// `rounds` (1 to kMaxRounds): 4, the sample order's, leaves a measurable bias on small domains (a few
// hundred elements: docs/ORDER.md); the shard-window order's permutations, often that small, take 8.
class Permutation {
 public:
  static constexpr int kMaxRounds = 8;
  Permutation(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t stream = 0, int rounds = 4);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_;
  int half_bits_ = 0;
  int rounds_ = 4;
  uint64_t mask_ = 0;
  std::array<uint64_t, kMaxRounds> keys_{};
};

struct Shard {
  int64_t rank = 0;
  int64_t world_size = 1;
  bool even_split = true;
};

// The shard-window order's global order (the kinds above, (a) to (c)): per global position, not per rank.
class ShardWindowOrder {
 public:
  static constexpr uint64_t kShardStream = 1;   // Permutation stream of the shard order
  static constexpr uint64_t kWindowStream = 2;  // window w's: kWindowStream + w
  static constexpr int kRounds = 8;             // Feistel rounds of its permutations
  // `shard_sizes`: samples per shard, >= 0 each, in index order; `window` >= 1 shards.
  ShardWindowOrder(const std::vector<int64_t>& shard_sizes, int64_t window, bool shuffle, uint64_t seed,
                   uint64_t epoch);
  int64_t size() const { return start_.back(); }  // N, every shard's samples
  // The source index at global position g in [0, N).
  int64_t operator()(int64_t g) const;
  // The shard (index-order number) that global position g reads.
  int64_t shard_at(int64_t g) const;
  int64_t num_windows() const { return num_windows_; }
  // Window w's first global position (N for w >= num_windows()): window w is [window_begin(w), window_begin(w + 1)).
  int64_t window_begin(int64_t w) const;

 private:
  // j in [lo, hi): position g lies in shard sequence_[j]'s samples.
  int64_t sequence_position(int64_t g, int64_t lo, int64_t hi) const;
  // The j of the shard global position g reads, and `v`, g's place after its window's shuffle.
  int64_t locate(int64_t g, int64_t* v) const;
  int64_t window_;
  bool shuffle_;
  int64_t num_windows_;
  std::vector<int64_t> sequence_;      // shards in reading order
  std::vector<int64_t> first_sample_;  // per shard (index order): its first source index
  std::vector<int64_t> start_;         // start_[j]: global position of sequence_[j]'s first sample; S + 1
  std::vector<Permutation> mix_;       // per window, with shuffle: the shuffle of its samples
};

// Which order an epoch follows (LoaderOptions::order).
enum class SampleOrder { kSample, kShards };
// "sample", "shards", and back.
const char* sample_order_name(SampleOrder order);
Result<SampleOrder> parse_sample_order(std::string_view name);

// The shard-window order's input besides (shuffle, seed, epoch, shard).
struct ShardWindows {
  std::vector<int64_t> shard_sizes;  // samples per shard, in index order
  int64_t window = 8;                // K: shards whose samples are shuffled together
  // Ok, or kInvalidArgument: window < 1, a negative size, or sizes whose sum overflows.
  Status check() const;
};

class EpochOrder {
 public:
  // `rest`: the rest of an interrupted epoch (above), made for this epoch's size and kind of split.
  EpochOrder(int64_t dataset_size, bool shuffle, uint64_t seed, uint64_t epoch, Shard shard = {},
             std::shared_ptr<const EpochRemainder> rest = nullptr);
  // The shard-window order (above); window >= 1.
  EpochOrder(const ShardWindows& shards, bool shuffle, uint64_t seed, uint64_t epoch, Shard shard = {},
             std::shared_ptr<const EpochRemainder> rest = nullptr);
  // Exactly these source indices, in this order (the caller checks they are inside the source).
  explicit EpochOrder(std::vector<int64_t> indices);
  // Samples this rank visits this epoch.
  int64_t size() const { return size_; }
  // The source index of this rank's k-th sample.
  int64_t operator[](int64_t k) const {
    if (explicit_) return (*explicit_)[static_cast<size_t>(k)];
    // The rank's k-th place in the epoch's global order, or in what `rest` left of it.
    int64_t place = windows_ ? first_ + k : k * shard_.world_size + shard_.rank;
    if (rest_) place = (*rest_)(place);
    if (windows_) return (*windows_)(place);
    return shuffle_ ? static_cast<int64_t>(permutation_(static_cast<uint64_t>(place))) : place;
  }
  // Samples a rank visits, for a dataset of n samples.
  static int64_t rank_size(int64_t n, const Shard& shard);
  // The global position of a rank's first sample when ranks take contiguous blocks (the shard-window
  // order): r * (n / W), plus min(r, n mod W) without even_split.
  static int64_t rank_first(int64_t n, const Shard& shard);
  // Whether `shard` can split a dataset of n samples: rank in [0, world_size), and with even_split at
  // least one sample per rank (otherwise every rank would get none, silently).
  static Status check_shard(int64_t n, const Shard& shard);

 private:
  int64_t size_;
  bool shuffle_;
  Shard shard_;
  Permutation permutation_;
  std::shared_ptr<const std::vector<int64_t>> explicit_;  // set: an explicit order
  std::shared_ptr<const ShardWindowOrder> windows_;       // set: the shard-window order
  std::shared_ptr<const EpochRemainder> rest_;            // set: the rest of an interrupted epoch
  int64_t first_ = 0;                                     // with windows_: this rank's first place
};

}  // namespace chute
