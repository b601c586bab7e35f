// Batch transforms: torchvision.transforms.v2's MixUp and CutMix on a whole batch, and RandomChoice between
// them, as the reference training recipe applies them after collation (`mixup_cutmix(*default_collate(b))`).
//
// The arithmetic is torchvision's, element for element, on the batch rolled by one along its first axis
// (sample i mixes with sample i - 1, sample 0 with the last):
//   MixUp   out[i] = float(x[i - 1] * float(1 - lam)) + float(x[i] * float(lam))   (float32 batches only)
//   CutMix  out[i] = x[i], with the box [y1, y2) x [x1, x2) of every channel taken from x[i - 1]
// with lam drawn from Beta(alpha, alpha), and for CutMix a centre (r_x, r_y) uniform over the image, the
// half-sides int(0.5 * sqrt(1 - lam) * W) and int(0.5 * sqrt(1 - lam) * H), the box clipped to the image,
// and the labels' weight corrected to 1 - box area / image area (torchvision's lam_adjusted). The labels
// themselves are mixed by the caller (one-hot, float32), with `label_lam`.
//
// Draws are chute's, not torch's: a counter-based stream keyed by (seed, epoch, batch key), where the batch
// key is the batch's end position in the epoch order (the epoch position after its last sample), in a
// counter domain of its own (the top bit set: no sample index has it). For one batch, in this order: the
// choice (RandomChoice's p, normalised), lam, then CutMix's r_x in [0, W) and r_y in [0, H). Same
// distributions as torchvision's, not the same values; the same batches whatever the thread count.
//
// Thread-safety: BatchMix is immutable; draw() and apply() may run on many threads (apply() on disjoint
// parts of one batch, or on different batches).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "chute/base/rng.h"
#include "chute/base/status.h"
#include "chute/transform/output.h"

namespace chute {

struct MixUp {
  double alpha = 1.0;
};
struct CutMix {
  double alpha = 1.0;
};
using BatchOp = std::variant<MixUp, CutMix>;

// What one batch drew. kind kNone: the batch is left as it is (no batch transform).
struct MixParams {
  enum class Kind { kNone, kMixUp, kCutMix };
  Kind kind = Kind::kNone;
  int choice = 0;      // which of BatchMix's ops
  double lam = 1.0;    // MixUp's weight of x[i]; CutMix's draw before the box
  int x1 = 0, y1 = 0;  // CutMix's box, [x1, x2) x [y1, y2)
  int x2 = 0, y2 = 0;
  double label_lam = 1;  // the labels' weight of sample i: lam, or CutMix's 1 - box area / image area
};

// The batch buffer apply() works on: `batch` samples of height x width x 3 values of `format`.
struct BatchShape {
  int64_t batch = 0;
  int height = 0, width = 0;
  OutputFormat format;
};

class BatchMix {
 public:
  // One op, or a RandomChoice among several with probabilities `p` (normalised; empty: equal). alpha must be
  // positive and finite; p's entries non-negative with a positive sum.
  static Result<BatchMix> create(std::vector<BatchOp> ops, std::vector<double> p = {});

  const std::vector<BatchOp>& ops() const { return ops_; }
  const std::vector<double>& p() const { return p_; }  // normalised
  bool has_mixup() const;
  // Ok when apply() can work on batches of `format`: MixUp needs float32 (torchvision's in-place multiply
  // refuses integers); CutMix copies, so any dtype.
  Status check_format(const OutputFormat& format) const;

  MixParams draw(EpochKey key, uint64_t batch_key, int height, int width) const;

 private:
  std::vector<BatchOp> ops_;
  std::vector<double> p_;
};

// Applies `params` in place to part `part` of `parts` of the batch: the parts split the values each sample
// contributes (MixUp) or the box's rows (CutMix), and may run at once on different threads; together they
// apply the whole op. `images` is the batch buffer.
void apply_batch_mix(const MixParams& params, const BatchShape& shape, void* images, int part = 0, int parts = 1);

// "mixup", "cutmix", "none".
const char* mix_kind_name(MixParams::Kind kind);

}  // namespace chute
