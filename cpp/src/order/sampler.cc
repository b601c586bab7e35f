#include "chute/order/sampler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "chute/base/rng.h"

namespace chute {
namespace {

// SplitMix64's finaliser: a fast, well-mixed 64-bit round function.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t stream, int rounds)
    : n_(n), rounds_(rounds) {
  CHUTE_CHECK(rounds >= 1 && rounds <= kMaxRounds);
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;  // an even number of bits covering n
  half_bits_ = bits / 2;
  mask_ = (uint64_t{1} << half_bits_) - 1;
  // Round keys from the counter-based generator, in a counter space of their own (sample index
  // UINT64_MAX - stream), apart from every sample's augmentation draws.
  SampleRng rng(seed, epoch, UINT64_MAX - stream);
  for (int r = 0; r < rounds_; ++r) keys_[r] = (uint64_t{rng.next_u32()} << 32) | rng.next_u32();
}

uint64_t Permutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & mask_;
  for (int r = 0; r < rounds_; ++r) {  // balanced Feistel rounds: a bijection for any round function
    const uint64_t next = left ^ (mix(right ^ keys_[r]) & mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t i) const {
  // Cycle-walking: the domain is at most 4n, so this takes under 4 steps on average.
  uint64_t x = i;
  do {
    x = encrypt(x);
  } while (x >= n_);
  return x;
}

const char* sample_order_name(SampleOrder order) { return order == SampleOrder::kShards ? "shards" : "sample"; }

Result<SampleOrder> parse_sample_order(std::string_view name) {
  if (name == "sample") return SampleOrder::kSample;
  if (name == "shards") return SampleOrder::kShards;
  return invalid_argument(
      "order must be 'sample' (a random permutation of every sample) or 'shards' (shuffled shards, read "
      "shard_window at a time), got '" +
      std::string(name) + "'");
}

Status ShardWindows::check() const {
  if (window < 1) return invalid_argument("shard_window must be >= 1, got " + std::to_string(window));
  int64_t total = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    if (shard_sizes[s] < 0)
      return invalid_argument("shard " + std::to_string(s) + " has a negative size " + std::to_string(shard_sizes[s]));
    if (__builtin_add_overflow(total, shard_sizes[s], &total))
      return invalid_argument("the shard sizes add up to more than 2^63 - 1 samples");
  }
  return Status::ok();
}

ShardWindowOrder::ShardWindowOrder(const std::vector<int64_t>& shard_sizes, int64_t window, bool shuffle, uint64_t seed,
                                   uint64_t epoch)
    : window_(window), shuffle_(shuffle) {
  CHUTE_CHECK((ShardWindows{shard_sizes, window}.check().is_ok()));
  const int64_t num_shards = static_cast<int64_t>(shard_sizes.size());
  num_windows_ = (num_shards + window - 1) / window;
  first_sample_.resize(shard_sizes.size());
  int64_t first = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) first_sample_[s] = first, first += shard_sizes[s];
  sequence_.resize(shard_sizes.size());
  const Permutation shard_order(static_cast<uint64_t>(num_shards), seed, epoch, kShardStream, kRounds);
  for (int64_t j = 0; j < num_shards; ++j)
    sequence_[j] = shuffle ? static_cast<int64_t>(shard_order(static_cast<uint64_t>(j))) : j;
  start_.resize(shard_sizes.size() + 1);
  start_[0] = 0;
  for (int64_t j = 0; j < num_shards; ++j) start_[j + 1] = start_[j] + shard_sizes[sequence_[j]];
  if (!shuffle) return;
  mix_.reserve(static_cast<size_t>(num_windows_));
  for (int64_t w = 0; w < num_windows_; ++w) {
    const int64_t samples = start_[std::min(num_shards, (w + 1) * window)] - start_[w * window];
    mix_.emplace_back(static_cast<uint64_t>(samples), seed, epoch, kWindowStream + static_cast<uint64_t>(w), kRounds);
  }
}

int64_t ShardWindowOrder::sequence_position(int64_t g, int64_t lo, int64_t hi) const {
  // The last j in [lo, hi) with start_[j] <= g (given start_[lo] <= g < start_[hi]): a shard with samples
  // (an empty shard starts where the next one does).
  return static_cast<int64_t>(std::upper_bound(start_.begin() + lo + 1, start_.begin() + hi + 1, g) - start_.begin()) -
         1;
}

int64_t ShardWindowOrder::locate(int64_t g, int64_t* v) const {
  const int64_t num_shards = static_cast<int64_t>(sequence_.size());
  const int64_t j = sequence_position(g, 0, num_shards);
  if (!shuffle_) {
    *v = g;
    return j;
  }
  const int64_t w = j / window_, j0 = w * window_, j1 = std::min(num_shards, j0 + window_);
  *v = start_[j0] + static_cast<int64_t>(mix_[w](static_cast<uint64_t>(g - start_[j0])));
  return sequence_position(*v, j0, j1);  // within the window: K + 1 prefix sums
}

int64_t ShardWindowOrder::operator()(int64_t g) const {
  int64_t v = 0;
  const int64_t j = locate(g, &v);
  return first_sample_[sequence_[j]] + (v - start_[j]);
}

int64_t ShardWindowOrder::window_begin(int64_t w) const {
  const int64_t num_shards = static_cast<int64_t>(sequence_.size());
  return start_[std::min(num_shards, std::clamp<int64_t>(w, 0, num_windows_) * window_)];
}

int64_t ShardWindowOrder::shard_at(int64_t g) const {
  int64_t v = 0;
  return sequence_[locate(g, &v)];
}

int64_t EpochOrder::rank_first(int64_t n, const Shard& shard) {
  const int64_t share = n / shard.world_size;
  return shard.rank * share + (shard.even_split ? 0 : std::min(shard.rank, n % shard.world_size));
}

int64_t EpochOrder::rank_size(int64_t n, const Shard& shard) {
  if (shard.even_split) return n / shard.world_size;
  return n > shard.rank ? (n - shard.rank + shard.world_size - 1) / shard.world_size : 0;
}

Status EpochOrder::check_shard(int64_t n, const Shard& shard) {
  if (shard.world_size <= 0 || shard.rank < 0 || shard.rank >= shard.world_size)
    return invalid_argument("rank must be in [0, world_size), got rank " + std::to_string(shard.rank) +
                            " of world_size " + std::to_string(shard.world_size));
  if (shard.even_split && shard.world_size > 1 && n < shard.world_size)
    return invalid_argument("world_size " + std::to_string(shard.world_size) + " is larger than the dataset (" +
                            std::to_string(n) + " samples): with even_split=True every rank would get " +
                            std::to_string(n) + " // " + std::to_string(shard.world_size) +
                            " = 0 samples. Use at most " + std::to_string(n) +
                            " ranks, or even_split=False (exact evaluation: each sample once, some ranks get none)");
  return Status::ok();
}

EpochOrder::EpochOrder(int64_t dataset_size, bool shuffle, uint64_t seed, uint64_t epoch, Shard shard,
                       std::shared_ptr<const EpochRemainder> rest)
    : size_(rank_size(rest ? rest->size() : dataset_size, shard)),
      shuffle_(shuffle),
      shard_(shard),
      permutation_(static_cast<uint64_t>(dataset_size), seed, epoch),
      rest_(std::move(rest)) {
  CHUTE_CHECK(!rest_ || (rest_->epoch_size() == dataset_size && !rest_->contiguous()));
}

EpochOrder::EpochOrder(const ShardWindows& shards, bool shuffle, uint64_t seed, uint64_t epoch, Shard shard,
                       std::shared_ptr<const EpochRemainder> rest)
    : size_(0),
      shuffle_(shuffle),
      shard_(shard),
      permutation_(0, 0, 0),
      windows_(std::make_shared<const ShardWindowOrder>(shards.shard_sizes, shards.window, shuffle, seed, epoch)),
      rest_(std::move(rest)) {
  CHUTE_CHECK(!rest_ || (rest_->epoch_size() == windows_->size() && rest_->contiguous()));
  const int64_t places = rest_ ? rest_->size() : windows_->size();
  size_ = rank_size(places, shard);
  first_ = rank_first(places, shard);
}

EpochOrder::EpochOrder(std::vector<int64_t> indices)
    : size_(static_cast<int64_t>(indices.size())),
      shuffle_(false),
      permutation_(0, 0, 0),
      explicit_(std::make_shared<const std::vector<int64_t>>(std::move(indices))) {}

}  // namespace chute
