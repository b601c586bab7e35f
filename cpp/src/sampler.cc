#include "chute/sampler.h"

#include <string>

#include "chute/rng.h"

namespace chute {
namespace {

// SplitMix64's finaliser: a fast, well-mixed 64-bit round function.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n) {
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;  // an even number of bits covering n
  half_bits_ = bits / 2;
  mask_ = (uint64_t{1} << half_bits_) - 1;
  // Round keys from the counter-based generator, in a counter space of their own (sample index
  // UINT64_MAX), apart from every sample's augmentation draws.
  SampleRng rng(seed, epoch, UINT64_MAX);
  for (auto& k : keys_) k = (uint64_t{rng.next_u32()} << 32) | rng.next_u32();
}

uint64_t Permutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & mask_;
  for (uint64_t key : keys_) {  // balanced Feistel rounds: a bijection for any round function
    const uint64_t next = left ^ (mix(right ^ key) & mask_);
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

EpochOrder::EpochOrder(int64_t dataset_size, bool shuffle, uint64_t seed, uint64_t epoch, Shard shard)
    : size_(rank_size(dataset_size, shard)),
      shuffle_(shuffle),
      shard_(shard),
      permutation_(static_cast<uint64_t>(dataset_size), seed, epoch) {}

EpochOrder::EpochOrder(std::vector<int64_t> indices)
    : size_(static_cast<int64_t>(indices.size())),
      shuffle_(false),
      permutation_(0, 0, 0),
      explicit_(std::make_shared<const std::vector<int64_t>>(std::move(indices))) {}

}  // namespace chute
