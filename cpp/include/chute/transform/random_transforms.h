// The random photometric and geometric transforms with torchvision's names, arguments and draws:
// ColorJitter, RandomGrayscale, GaussianBlur, RandomRotation, RandomAffine. Each draws its parameters
// (torchvision's get_params, in distribution) from the sample's SampleRng and becomes the functional ops
// torchvision's forward calls, with the arithmetic of `backend`: kPil as on a PIL image (the recipes),
// kTensor as on a uint8 tensor; GaussianBlur always the tensor one (torchvision blurs PIL images as tensors).
// Thread-safety: the transforms are immutable values; the functions are pure given the SampleRng.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "chute/base/rng.h"
#include "chute/base/status.h"
#include "chute/transform/pixel_ops.h"

namespace chute {

using Range = std::array<double, 2>;  // [min, max]

// Each factor uniform in its range (none: not drawn, torchvision's None), applied in a random order.
struct ColorJitter {
  std::optional<Range> brightness, contrast, saturation, hue;
  PixelBackend backend = PixelBackend::kPil;  // the tensor path has no adjust_hue here
  TorchvisionApi api = TorchvisionApi::kV1;
};

struct RandomGrayscale {
  double p = 0.1;
  PixelBackend backend = PixelBackend::kPil;
  TorchvisionApi api = TorchvisionApi::kV1;
};

// sigma uniform in [sigma_min, sigma_max], the same on both axes.
struct GaussianBlur {
  int kernel_width = 3, kernel_height = 3;
  double sigma_min = 0.1, sigma_max = 2.0;
  TorchvisionApi api = TorchvisionApi::kV1;
};

// The angle uniform in `degrees` (counter-clockwise), about `center` (none: the image centre); expand=False.
struct RandomRotation {
  Range degrees{0.0, 0.0};
  Interpolation interpolation = Interpolation::kNearest;
  std::optional<std::array<double, 2>> center;
  Fill fill;
  PixelBackend backend = PixelBackend::kPil;
  TorchvisionApi api = TorchvisionApi::kV1;
};

// torchvision's RandomAffine.get_params: angle uniform in `degrees`; translation int(round(U(-t * size,
// t * size))) per axis; scale uniform in `scale`; shear x (and y, when four values are given) uniform.
struct RandomAffine {
  Range degrees{0.0, 0.0};
  std::optional<Range> translate;  // fractions of width and height, in [0, 1]
  std::optional<Range> scale;
  std::optional<Range> shear_x, shear_y;
  Interpolation interpolation = Interpolation::kNearest;
  std::optional<std::array<double, 2>> center;
  Fill fill;
  PixelBackend backend = PixelBackend::kPil;
  TorchvisionApi api = TorchvisionApi::kV1;
};

Status validate(const ColorJitter& t);
Status validate(const RandomGrayscale& t);
Status validate(const GaussianBlur& t);
Status validate(const RandomRotation& t);
Status validate(const RandomAffine& t);

// Appends the functional ops the transform applies to a width x height image, in order.
void draw_ops(const ColorJitter& t, SampleRng& rng, int width, int height, std::vector<PixelOp>& out);
void draw_ops(const RandomGrayscale& t, SampleRng& rng, int width, int height, std::vector<PixelOp>& out);
void draw_ops(const GaussianBlur& t, SampleRng& rng, int width, int height, std::vector<PixelOp>& out);
void draw_ops(const RandomRotation& t, SampleRng& rng, int width, int height, std::vector<PixelOp>& out);
void draw_ops(const RandomAffine& t, SampleRng& rng, int width, int height, std::vector<PixelOp>& out);

}  // namespace chute
