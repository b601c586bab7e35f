// Counter-based randomness: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11). The key is the 64-bit seed; the 128-bit counter is (sample index, epoch, block number).
//
// A sample's random draws depend only on (seed, epoch, sample index), never on which thread decoded it,
// in what order, or where a run was resumed. Thread-safety: SampleRng is a small value owned by one task.
#pragma once

#include <array>
#include <cstdint>

namespace chute {

// What keys one epoch's augmentation: the seed (Philox's key) and the epoch number (a counter word). A
// chute.Loader keeps its seed across epochs; a torch DataLoader draws a new seed each epoch.
struct EpochKey {
  uint64_t seed = 0;
  uint64_t epoch = 0;
};

// One Philox4x32-10 block: 4 random 32-bit words for a 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t sample_index);
  uint32_t next_u32();
  // Uniform in [0, 1) with 24 bits of resolution, like torch's float draws.
  double uniform();
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi] (inclusive), without modulo bias.
  int64_t integer(int64_t lo, int64_t hi);
  // Uniform in the open interval (0, 1) with 53 bits of resolution (for logarithms of the draw).
  double open_uniform();
  // A standard normal (Box-Muller: each pair of uniforms gives two, the second kept for the next call).
  double normal();

 private:
  std::array<uint32_t, 2> key_;
  uint64_t sample_index_;
  uint32_t epoch_ = 0;
  uint32_t block_ = 0;               // which Philox block we are in
  std::array<uint32_t, 4> words_{};  // the current block's output
  int used_ = 4;                     // words of words_ already handed out
  bool has_normal_ = false;          // normal(): the second of the last pair
  double normal_ = 0.0;
};

}  // namespace chute
