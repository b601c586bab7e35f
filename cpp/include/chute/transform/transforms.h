// Transforms with torchvision's names and semantics, and the per-sample plan they compile to.
//
// The geometric transforms (RandomResizedCrop, Resize, CenterCrop) compose, per axis, into one shape:
// a window of the source image, resized once, of which a range of outputs is kept. That lets the decoder
// decode only the window and the resampler compute only the kept outputs, while the pixels stay those of
// torchvision's crop-then-resize on PIL images. The augmentations after them (the pixel stage:
// pixel_stage.h) act on the resized image; RandomHorizontalFlip and Normalize act on the output (the flip
// moves into the pixel stage when augmentations follow it), RandomErasing on the written sample.
// Thread-safety: Pipeline is immutable after construction; plan() and the draws may run on many threads.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "chute/base/rng.h"
#include "chute/base/status.h"
#include "chute/transform/pixel_stage.h"
#include "chute/transform/resample.h"

namespace chute {

struct RandomResizedCrop {
  int height = 224, width = 224;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

// torchvision Resize: with `width == 0`, the shorter side becomes `height` and the longer side
// int(height * long / short); otherwise the image becomes exactly height x width.
struct Resize {
  int height = 0, width = 0;
};

// torchvision CenterCrop: an image smaller than the crop is padded with zeros first, as torchvision does.
struct CenterCrop {
  int height = 0, width = 0;
};

struct RandomHorizontalFlip {
  double p = 0.5;
};

// Applied to values scaled to [0, 1], like torchvision's ToTensor + Normalize.
struct Normalize {
  std::array<float, 3> mean{0.f, 0.f, 0.f};
  std::array<float, 3> std{1.f, 1.f, 1.f};
};

using Transform = std::variant<RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Normalize, AutoAugment,
                               RandAugment, TrivialAugmentWide, AugMix, ColorJitter, RandomGrayscale, GaussianBlur,
                               RandomRotation, RandomAffine, RandomErasing>;

class OutputWriter;

// What one sample needs: the source window to decode, the resampling from it, and the flip.
struct SamplePlan {
  // The decoder's output is the image reduced `reduction` times (a scaled IDCT: 1, 2, 4 or 8), and the
  // window is in that reduced image's pixels.
  int reduction = 1;
  int window_x = 0, window_y = 0, window_width = 0, window_height = 0;
  AxisCoeffs xs, ys;  // rebased to the window's origin
  // Zero pixels around the resampled image (a CenterCrop larger than the image, as torchvision pads):
  // the output is (pad_left + xs.out_size + pad_right) wide, and so on. The zeros are pixel values, before
  // the flip and Normalize, as in torchvision's pipeline on PIL images.
  int pad_left = 0, pad_top = 0, pad_right = 0, pad_bottom = 0;
  bool flip = false;
};

class Pipeline {
 public:
  // Checks the list: one resize at most, a fixed output size, the augmentations after the geometric
  // transforms, Normalize last but for RandomErasing.
  static Result<Pipeline> create(std::vector<Transform> transforms);

  int out_height() const { return out_height_; }
  int out_width() const { return out_width_; }
  const std::optional<Normalize>& normalize() const { return normalize_; }

  // Whether a sample has draws and work after the resample (the pixel stage or RandomErasing); without,
  // the processor's path is the plain one.
  bool augments() const { return !pixel_.empty() || !erasing_.empty(); }
  // Whether the writer flips a sample the plan flipped (no pixel transform follows the flip).
  bool writer_flips() const { return !pixel_.flips(); }
  // The sample's draws after plan()'s, from the same SampleRng: the pixel stage's, then each
  // RandomErasing's, for the output size. `draws` is cleared first.
  void draw_augment(SampleRng& rng, AugmentDraws& draws) const;
  // The pixel stage on the resampled image (out_width() x out_height() RGB), with the plan's flip.
  void augment(const AugmentDraws& draws, bool flip, std::vector<uint8_t>& pixels, AugmentScratch& scratch) const {
    pixel_.apply(draws, flip, pixels, out_width_, out_height_, scratch);
  }
  // The erasings on the sample the writer wrote into `dst`.
  void erase(const AugmentDraws& draws, const OutputWriter& writer, void* dst) const;

  // Draws this sample's random parameters from `rng` and plans its decode for an image of the given size.
  // With max_reduction > 1 (a decoder that can scale while decoding), the window is decoded d = 2, 4 or 8
  // times smaller, the largest d <= max_reduction that leaves the resize a shrink of at least
  // `reducing_gap` on both axes (window / d / output >= reducing_gap: Pillow's reducing_gap, which must be
  // >= 1); the random draws and the window are the same either way.
  Result<SamplePlan> plan(int image_width, int image_height, SampleRng& rng, int max_reduction = 1,
                          double reducing_gap = 1.0) const;

 private:
  std::vector<Transform> geometric_;  // RandomResizedCrop, Resize, CenterCrop, in order
  std::optional<RandomHorizontalFlip> flip_;
  std::optional<Normalize> normalize_;
  PixelStage pixel_;
  struct Erasing {
    RandomErasing t;
    bool before_normalize;  // its values are in [0, 1] units, normalised by the Normalize that follows
  };
  std::vector<Erasing> erasing_;
  int out_height_ = 0, out_width_ = 0;
};

// torchvision's RandomResizedCrop.get_params: ten tries, then a centre crop clamped to the ratio range.
// Returns the window {x, y, width, height} of a width x height image.
struct CropBox {
  int x, y, width, height;
};
CropBox random_resized_crop_box(int width, int height, const RandomResizedCrop& t, SampleRng& rng);

}  // namespace chute
