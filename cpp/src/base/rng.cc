#include "chute/base/rng.h"

#include <cmath>

namespace chute {
namespace {
constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;    // Philox round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;  // key schedule increments
}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kMul0} * c[0];
    const uint64_t p1 = uint64_t{kMul1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k = {k[0] + kWeyl0, k[1] + kWeyl1};
  }
  return c;
}

SampleRng::SampleRng(uint64_t seed, uint64_t epoch, uint64_t sample_index)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, sample_index_(sample_index), block_(0) {
  // The epoch rides in the counter's third word; blocks count draws within one sample.
  epoch_ = static_cast<uint32_t>(epoch);
}

uint32_t SampleRng::next_u32() {
  if (used_ == 4) {
    words_ = philox4x32(
        {static_cast<uint32_t>(sample_index_), static_cast<uint32_t>(sample_index_ >> 32), epoch_, block_++}, key_);
    used_ = 0;
  }
  return words_[used_++];
}

double SampleRng::uniform() { return (next_u32() >> 8) * (1.0 / 16777216.0); }

int64_t SampleRng::integer(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  if (span == 0) return lo;  // the whole int64 range: not used, but well defined
  // Rejection sampling on 64-bit draws (Lemire's threshold) keeps the result unbiased.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  for (;;) {
    const uint64_t r = (uint64_t{next_u32()} << 32) | next_u32();
    if (r < limit) return lo + static_cast<int64_t>(r % span);
  }
}

double SampleRng::open_uniform() {
  const uint64_t bits = (uint64_t{next_u32()} << 21) ^ (next_u32() >> 11);  // 53 random bits
  return (static_cast<double>(bits) + 0.5) * 0x1p-53;
}

double SampleRng::normal() {
  if (has_normal_) {
    has_normal_ = false;
    return normal_;
  }
  const double r = std::sqrt(-2.0 * std::log(open_uniform())), theta = 2.0 * M_PI * open_uniform();
  normal_ = r * std::sin(theta);
  has_normal_ = true;
  return r * std::cos(theta);
}

}  // namespace chute
