// Built with -ffp-contract=off (CMakeLists.txt): MixUp's two products and their sum are rounded one by
// one, as torch's separate mul_ and add_ kernels round them; a fused multiply-add would differ in the last bit.
#include "chute/transform/batch_mix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

namespace chute {
namespace {

// Batch draws live in a counter domain of their own: sample draws key on source indices, below 2^63.
constexpr uint64_t kBatchDomain = uint64_t{1} << 63;

// Uniform in [0, 1) with 53 bits (torch's double draws have as many).
double uniform53(SampleRng& rng) {
  const uint64_t a = rng.next_u32() >> 5, b = rng.next_u32() >> 6;
  return static_cast<double>((a << 26) | b) * (1.0 / 9007199254740992.0);
}

double standard_normal(SampleRng& rng) {  // Box-Muller
  const double u1 = 1.0 - uniform53(rng), u2 = uniform53(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// log of a Gamma(k, 1) draw: Marsaglia and Tsang's method (2000), with Gamma(k) = Gamma(k + 1) * U^(1/k)
// for k < 1, in logs so that a small alpha's tiny draws do not underflow to 0.
double log_gamma(double k, SampleRng& rng) {
  if (k < 1.0) return log_gamma(k + 1.0, rng) + std::log(1.0 - uniform53(rng)) / k;
  const double d = k - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = standard_normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = 1.0 - uniform53(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d) + std::log(v);
  }
}

// Beta(alpha, alpha) = X / (X + Y) with X, Y ~ Gamma(alpha); rounded to float32, as torch's Beta samples are.
double beta(double alpha, SampleRng& rng) {
  const double lx = log_gamma(alpha, rng), ly = log_gamma(alpha, rng);
  return static_cast<double>(static_cast<float>(1.0 / (1.0 + std::exp(ly - lx))));
}

// A stretch of `length` values at `offset` within each sample, handled by one part.
struct Segment {
  size_t offset, length;
};

// The stretches of a sample an op changes, in values: MixUp all of them, split into `parts` pieces; CutMix
// the box's row of each channel (NCHW), or the box's row across channels (NHWC).
std::vector<Segment> segments(const MixParams& p, const BatchShape& s, int parts) {
  const size_t h = static_cast<size_t>(s.height), w = static_cast<size_t>(s.width), values = 3 * h * w;
  std::vector<Segment> out;
  if (p.kind == MixParams::Kind::kMixUp) {
    for (int j = 0; j < parts; ++j) {
      const size_t a = values * j / parts, b = values * (j + 1) / parts;
      if (b > a) out.push_back({a, b - a});
    }
    return out;
  }
  if (p.x2 <= p.x1 || p.y2 <= p.y1) return out;
  const size_t x1 = static_cast<size_t>(p.x1), bw = static_cast<size_t>(p.x2 - p.x1);
  for (int y = p.y1; y < p.y2; ++y) {
    if (s.format.layout == Layout::kNCHW) {
      for (size_t c = 0; c < 3; ++c) out.push_back({c * h * w + static_cast<size_t>(y) * w + x1, bw});
    } else {
      out.push_back({(static_cast<size_t>(y) * w + x1) * 3, bw * 3});
    }
  }
  return out;
}

}  // namespace

const char* mix_kind_name(MixParams::Kind kind) {
  switch (kind) {
    case MixParams::Kind::kMixUp:
      return "mixup";
    case MixParams::Kind::kCutMix:
      return "cutmix";
    case MixParams::Kind::kNone:
      break;
  }
  return "none";
}

Result<BatchMix> BatchMix::create(std::vector<BatchOp> ops, std::vector<double> p) {
  if (ops.empty()) return invalid_argument("a batch transform needs at least one of MixUp, CutMix");
  for (const BatchOp& op : ops) {
    const double alpha = std::visit([](const auto& o) { return o.alpha; }, op);
    if (!(alpha > 0.0) || !std::isfinite(alpha))
      return invalid_argument("MixUp/CutMix alpha must be positive and finite, got " + std::to_string(alpha));
  }
  if (p.empty()) p.assign(ops.size(), 1.0);
  if (p.size() != ops.size())
    return invalid_argument("RandomChoice has " + std::to_string(ops.size()) + " transforms but " +
                            std::to_string(p.size()) + " probabilities");
  double total = 0.0;
  for (double v : p) {
    if (!(v >= 0.0) || !std::isfinite(v)) return invalid_argument("RandomChoice's p must be non-negative numbers");
    total += v;
  }
  if (!(total > 0.0)) return invalid_argument("RandomChoice's p must not all be zero");
  for (double& v : p) v /= total;  // as torchvision's RandomChoice normalises them
  BatchMix m;
  m.ops_ = std::move(ops);
  m.p_ = std::move(p);
  return m;
}

bool BatchMix::has_mixup() const {
  return std::any_of(ops_.begin(), ops_.end(), [](const BatchOp& op) { return std::holds_alternative<MixUp>(op); });
}

Status BatchMix::check_format(const OutputFormat& format) const {
  if (has_mixup() && format.dtype != DType::kFloat32)
    return invalid_argument(std::string("MixUp mixes float32 batches only (torchvision refuses ") +
                            dtype_name(format.dtype) + " images: its in-place multiply cannot hold the result)");
  return Status::ok();
}

MixParams BatchMix::draw(EpochKey key, uint64_t batch_key, int height, int width) const {
  SampleRng rng(key.seed, key.epoch, kBatchDomain | batch_key);
  MixParams out;
  out.choice = static_cast<int>(ops_.size()) - 1;
  if (ops_.size() > 1) {
    const double u = uniform53(rng);
    double cumulative = 0.0;
    for (size_t i = 0; i < p_.size(); ++i) {
      cumulative += p_[i];
      if (u < cumulative) {
        out.choice = static_cast<int>(i);
        break;
      }
    }
  }
  const BatchOp& op = ops_[static_cast<size_t>(out.choice)];
  if (const auto* mixup = std::get_if<MixUp>(&op)) {
    out.kind = MixParams::Kind::kMixUp;
    out.lam = out.label_lam = beta(mixup->alpha, rng);
    return out;
  }
  out.kind = MixParams::Kind::kCutMix;
  out.lam = beta(std::get<CutMix>(op).alpha, rng);
  const int64_t r_x = rng.integer(0, width - 1), r_y = rng.integer(0, height - 1);
  const double r = 0.5 * std::sqrt(1.0 - out.lam);
  const int64_t r_w_half = static_cast<int64_t>(r * width), r_h_half = static_cast<int64_t>(r * height);
  out.x1 = static_cast<int>(std::max<int64_t>(r_x - r_w_half, 0));
  out.y1 = static_cast<int>(std::max<int64_t>(r_y - r_h_half, 0));
  out.x2 = static_cast<int>(std::min<int64_t>(r_x + r_w_half, width));
  out.y2 = static_cast<int>(std::min<int64_t>(r_y + r_h_half, height));
  out.label_lam =
      1.0 - static_cast<double>(out.x2 - out.x1) * (out.y2 - out.y1) / (static_cast<double>(width) * height);
  return out;
}

void apply_batch_mix(const MixParams& params, const BatchShape& shape, void* images, int part, int parts) {
  if (params.kind == MixParams::Kind::kNone || shape.batch <= 0) return;
  const std::vector<Segment> all = segments(params, shape, parts);
  const size_t first = all.size() * part / parts, last = all.size() * (part + 1) / parts;
  if (first == last) return;
  const int64_t n = shape.batch;
  const size_t elem = dtype_size(shape.format.dtype), sample = static_cast<size_t>(shape.height) * shape.width * 3;
  uint8_t* base = static_cast<uint8_t*>(images);
  auto at = [&](int64_t i, const Segment& s) { return base + (static_cast<size_t>(i) * sample + s.offset) * elem; };
  size_t longest = 0;
  for (size_t k = first; k < last; ++k) longest = std::max(longest, all[k].length);
  // Sample 0 mixes with the last one, which is overwritten first: its stretch is kept aside.
  std::vector<uint8_t> last_sample(longest * elem);
  if (params.kind == MixParams::Kind::kCutMix) {
    for (size_t k = first; k < last; ++k) {
      const Segment& s = all[k];
      const size_t bytes = s.length * elem;
      std::memcpy(last_sample.data(), at(n - 1, s), bytes);
      for (int64_t i = n - 1; i > 0; --i) std::memcpy(at(i, s), at(i - 1, s), bytes);
      std::memcpy(at(0, s), last_sample.data(), bytes);
    }
    return;
  }
  // MixUp, float32: torchvision's x.roll(1, 0).mul_(1 - lam).add_(x.mul(lam)), rounded as torch rounds it.
  const float keep = static_cast<float>(params.lam), take = static_cast<float>(1.0 - params.lam);
  for (size_t k = first; k < last; ++k) {
    const Segment& s = all[k];
    std::memcpy(last_sample.data(), at(n - 1, s), s.length * sizeof(float));
    for (int64_t i = n - 1; i >= 0; --i) {
      float* x = reinterpret_cast<float*>(at(i, s));
      const float* prev =
          i > 0 ? reinterpret_cast<const float*>(at(i - 1, s)) : reinterpret_cast<const float*>(last_sample.data());
      for (size_t v = 0; v < s.length; ++v) {
        const float rolled = prev[v] * take, own = x[v] * keep;
        x[v] = rolled + own;
      }
    }
  }
}

}  // namespace chute
