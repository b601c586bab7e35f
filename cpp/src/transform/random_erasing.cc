#include "chute/transform/random_erasing.h"

#include <cmath>

namespace chute {

Status validate(const RandomErasing& t) {
  if (!(t.p >= 0.0 && t.p <= 1.0))
    return invalid_argument("RandomErasing: Random erasing probability should be between 0 and 1");
  if (!(t.scale_min >= 0.0 && t.scale_max <= 1.0))
    return invalid_argument("RandomErasing: Scale should be between 0 and 1");
  if (!(t.scale_min <= t.scale_max) || !(t.ratio_min <= t.ratio_max))
    return invalid_argument("RandomErasing: Scale and ratio should be of kind (min, max)");
  if (!(t.ratio_min > 0.0)) return invalid_argument("RandomErasing: ratio should be positive");
  for (float v : t.value)
    if (!std::isfinite(v)) return invalid_argument("RandomErasing: value must be finite");
  return Status::ok();
}

ErasingDraw draw_erasing(const RandomErasing& t, SampleRng& rng, int width, int height) {
  ErasingDraw d;
  if (!(rng.uniform() < static_cast<float>(t.p))) return d;
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(t.ratio_min), log_hi = std::log(t.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(t.scale_min, t.scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height && w < width)) continue;
    d.erase = true;
    d.height = h;
    d.width = w;
    d.top = static_cast<int>(rng.integer(0, height - h));
    d.left = static_cast<int>(rng.integer(0, width - w));
    if (t.random) d.values_key = (uint64_t{rng.next_u32()} << 32) | rng.next_u32();
    return d;
  }
  return d;
}

float ErasingValues::next(int channel) {
  // torch's normal_() on float32: a standard normal per element.
  return t_.random ? static_cast<float>(rng_.normal()) : t_.value[channel];
}

}  // namespace chute
