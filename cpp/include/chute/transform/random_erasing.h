// RandomErasing with torchvision's arguments and draws. It acts on the output tensor (in torchvision's
// recipes after ToTensor and Normalize), so chute applies it in the output writer's units: after the
// sample is written, a rectangle of the batch slot is overwritten in its dtype and layout. Its values are
// in the units of the tensor at that point of the user's list: normalised when RandomErasing follows
// Normalize, [0, 1] (then normalised) before it, uint8 levels for uint8 output.
// Thread-safety: RandomErasing is an immutable value; draw() is pure given the SampleRng.
#pragma once

#include <array>
#include <cstdint>

#include "chute/base/rng.h"
#include "chute/base/status.h"

namespace chute {

struct RandomErasing {
  double p = 0.5;
  double scale_min = 0.02, scale_max = 0.33;  // the erased fraction of the area
  double ratio_min = 0.3, ratio_max = 3.3;    // its aspect ratio (height / width, as torchvision draws it)
  bool random = false;                        // value='random': a standard normal per element
  std::array<float, 3> value{0.f, 0.f, 0.f};  // otherwise one value per channel
};
Status validate(const RandomErasing& t);

// The rectangle one sample erases (none when the coin fails or ten tries find no fit), and the key of its
// 'random' values' stream.
struct ErasingDraw {
  bool erase = false;
  int top = 0, left = 0, height = 0, width = 0;
  uint64_t values_key = 0;
};
// torchvision's forward and get_params: rand() < p, then up to ten tries of area ~ U(scale) * H * W and
// log-ratio ~ U(log ratio): h = round(sqrt(area * ratio)), w = round(sqrt(area / ratio)), accepted when
// h < H and w < W, at a uniform position.
ErasingDraw draw_erasing(const RandomErasing& t, SampleRng& rng, int width, int height);

// The value of element (channel c, row y, column x) of the erased rectangle, before any Normalize that
// follows: the constant, or the next standard normal of the draw's stream (channel-major order).
class ErasingValues {
 public:
  ErasingValues(const RandomErasing& t, const ErasingDraw& draw) : t_(t), rng_(draw.values_key, 0, 0) {}
  float next(int channel);
  bool random() const { return t_.random; }

 private:
  const RandomErasing& t_;
  SampleRng rng_;
};

}  // namespace chute
