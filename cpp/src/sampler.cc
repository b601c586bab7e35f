#include "chute/sampler.h"

#include <cstddef>
#include <numeric>
#include <utility>

#include "chute/rng.h"

namespace chute {

// The shuffle's draws live in their own counter space (sample index UINT64_MAX), apart from every
// sample's augmentation draws.
EpochOrder::EpochOrder(int64_t size, bool shuffle, uint64_t seed, uint64_t epoch)
    : size_(size), shuffled_(shuffle) {
  if (!shuffle) return;
  perm_.resize(static_cast<std::size_t>(size));
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  SampleRng rng(seed, epoch, UINT64_MAX);
  for (int64_t i = size - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.integer(0, i)]);
}

}  // namespace chute
