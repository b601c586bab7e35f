#include "chute/transform/transforms.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "chute/transform/output.h"

namespace chute {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // clang 14 does not deduce aggregates yet

// One axis of the composed geometry: source range [offset, offset + length), resized to `resized`
// (or not at all), of which outputs [out_offset, out_offset + out_length) are kept, with `pad_before`
// and `pad_after` zero pixels around them (a CenterCrop larger than the image, as torchvision pads).
struct Axis {
  int offset = 0, length = 0;
  int resized = -1;
  int out_offset = 0, out_length = 0;
  int pad_before = 0, pad_after = 0;

  explicit Axis(int size) : length(size), out_length(size) {}
  int size() const { return pad_before + out_length + pad_after; }  // the image as transforms see it
  bool padded() const { return pad_before > 0 || pad_after > 0; }
  // Keeps [first, first + count) of the image, padding included; false if only padding would be left.
  bool crop(int first, int count) {
    const int content_first = std::max(first, pad_before);
    const int content_end = std::min(first + count, pad_before + out_length);
    if (content_end <= content_first) return false;
    crop_content(content_first - pad_before, content_end - content_first);
    pad_before = content_first - first;
    pad_after = first + count - content_end;
    return true;
  }
  void pad(int before, int after) {
    pad_before += before;
    pad_after += after;
  }
  void resize(int size) {
    resized = size;
    out_offset = 0;
    out_length = size;
  }

 private:
  void crop_content(int first, int count) {
    if (resized < 0) {
      offset += first;
      length = count;
    } else {
      out_offset += first;
    }
    out_length = count;
  }
};

std::string size_text(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

Status resize_after_padding() {
  return unsupported(
      "a resize after a CenterCrop that padded the image (it was smaller than the crop) is not "
      "supported: torchvision would resize the zero border too");
}

template <class T, class V>
struct IsAlternative;
template <class T, class... Ts>
struct IsAlternative<T, std::variant<Ts...>> : std::bool_constant<(std::is_same_v<T, Ts> || ...)> {};

// The transform as a pixel-stage step, if it is one.
std::optional<PixelTransform> as_pixel_transform(const Transform& t) {
  return std::visit(
      [](const auto& x) -> std::optional<PixelTransform> {
        if constexpr (IsAlternative<std::decay_t<decltype(x)>, PixelTransform>::value) {
          return PixelTransform(x);
        } else {
          return std::nullopt;
        }
      },
      t);
}

bool is_geometric(const Transform& t) {
  return std::holds_alternative<RandomResizedCrop>(t) || std::holds_alternative<Resize>(t) ||
         std::holds_alternative<CenterCrop>(t);
}

// Python's round(): halves go to the even neighbour.
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

CropBox random_resized_crop_box(int width, int height, const RandomResizedCrop& t, SampleRng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(t.ratio_min), log_hi = std::log(t.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(t.scale_min, t.scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = round_half_even(std::sqrt(target_area * aspect));
    const int h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int y = static_cast<int>(rng.integer(0, height - h));
      const int x = static_cast<int>(rng.integer(0, width - w));
      return {x, y, w, h};
    }
  }
  // Fallback to a central crop.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < std::min(t.ratio_min, t.ratio_max)) {
    h = round_half_even(w / std::min(t.ratio_min, t.ratio_max));
  } else if (in_ratio > std::max(t.ratio_min, t.ratio_max)) {
    w = round_half_even(h * std::max(t.ratio_min, t.ratio_max));
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

Result<Pipeline> Pipeline::create(std::vector<Transform> transforms) {
  Pipeline p;
  int resizes = 0;
  int fixed_h = 0, fixed_w = 0;  // the output size, once a transform fixes it
  bool flip_pending = false;     // a RandomHorizontalFlip no augmentation has followed yet
  for (size_t i = 0; i < transforms.size(); ++i) {
    if (const auto* erasing = std::get_if<RandomErasing>(&transforms[i])) {
      CHUTE_RETURN_IF_ERROR(validate(*erasing));
      p.erasing_.push_back({*erasing, !p.normalize_});  // before_normalize is settled after the loop
      continue;
    }
    if (p.normalize_) return invalid_argument("Normalize must be the last transform (RandomErasing may follow it)");
    if (!p.erasing_.empty() && !std::holds_alternative<Normalize>(transforms[i]))
      return unsupported(
          "RandomErasing acts on the output tensor: only Normalize (or another RandomErasing) may follow it");
    if (is_geometric(transforms[i]) && !p.pixel_.empty())
      return unsupported(
          "RandomResizedCrop, Resize and CenterCrop must come before the augmentations: chute augments the resized "
          "image");
    if (std::optional<PixelTransform> pixel = as_pixel_transform(transforms[i])) {
      if (flip_pending) CHUTE_RETURN_IF_ERROR(p.pixel_.add(FlipHere{}));  // the flip happens before this step
      flip_pending = false;
      CHUTE_RETURN_IF_ERROR(p.pixel_.add(std::move(*pixel)));
      continue;
    }
    Status st =
        std::visit(Overloaded{[&](const RandomResizedCrop& t) -> Status {
                                if (t.height <= 0 || t.width <= 0)
                                  return invalid_argument("RandomResizedCrop size must be positive");
                                if (!(0 < t.scale_min && t.scale_min <= t.scale_max && t.scale_max <= 1.0))
                                  return invalid_argument("RandomResizedCrop scale must satisfy 0 < min <= max <= 1");
                                if (!(0 < t.ratio_min && t.ratio_min <= t.ratio_max))
                                  return invalid_argument("RandomResizedCrop ratio must satisfy 0 < min <= max");
                                ++resizes;
                                fixed_h = t.height, fixed_w = t.width;
                                p.geometric_.push_back(t);
                                return Status::ok();
                              },
                              [&](const Resize& t) -> Status {
                                if (t.height <= 0 || t.width < 0)
                                  return invalid_argument("Resize size must be positive");
                                ++resizes;
                                fixed_h = t.width ? t.height : 0, fixed_w = t.width;
                                p.geometric_.push_back(t);
                                return Status::ok();
                              },
                              [&](const CenterCrop& t) -> Status {
                                if (t.height <= 0 || t.width <= 0)
                                  return invalid_argument("CenterCrop size must be positive");
                                fixed_h = t.height, fixed_w = t.width;
                                p.geometric_.push_back(t);
                                return Status::ok();
                              },
                              [&](const RandomHorizontalFlip& t) -> Status {
                                if (p.flip_) return invalid_argument("RandomHorizontalFlip appears twice");
                                if (!(t.p >= 0.0 && t.p <= 1.0))
                                  return invalid_argument("RandomHorizontalFlip p must be in [0, 1]");
                                p.flip_ = t;
                                flip_pending = true;
                                return Status::ok();
                              },
                              [&](const Normalize& t) -> Status {
                                for (float s : t.std)
                                  if (!(s != 0.f)) return invalid_argument("Normalize std must be non-zero");
                                p.normalize_ = t;
                                return Status::ok();
                              },
                              [](const auto&) -> Status { return Status::ok(); }},  // handled above
                   transforms[i]);
    CHUTE_RETURN_IF_ERROR(st);
  }
  if (resizes > 1) return unsupported("chute resamples each image once: use one of RandomResizedCrop and Resize");
  if (fixed_h == 0)
    return invalid_argument(
        "batched images need one size: end the geometric transforms with RandomResizedCrop, CenterCrop or "
        "Resize((h, w))");
  p.out_height_ = fixed_h;
  p.out_width_ = fixed_w;
  if (!p.normalize_)
    for (Erasing& e : p.erasing_) e.before_normalize = false;
  CHUTE_RETURN_IF_ERROR(p.pixel_.check_size(fixed_w, fixed_h));
  return p;
}

void Pipeline::draw_augment(SampleRng& rng, AugmentDraws& draws) const {
  draws.clear();
  pixel_.draw(rng, out_width_, out_height_, draws);
  for (const Erasing& e : erasing_) draws.erasing.push_back(draw_erasing(e.t, rng, out_width_, out_height_));
}

void Pipeline::erase(const AugmentDraws& draws, const OutputWriter& writer, void* dst) const {
  for (size_t i = 0; i < erasing_.size(); ++i) {
    if (!draws.erasing[i].erase) continue;
    ErasingValues values(erasing_[i].t, draws.erasing[i]);
    writer.erase(dst, draws.erasing[i], values, erasing_[i].before_normalize ? &*normalize_ : nullptr);
  }
}

Result<SamplePlan> Pipeline::plan(int image_width, int image_height, SampleRng& rng, int max_reduction,
                                  double reducing_gap) const {
  CHUTE_CHECK(reducing_gap >= 1.0);  // checked where the options are made (Loader::create)
  if (image_width <= 0 || image_height <= 0) return corrupt_data("image has no pixels");
  Axis x(image_width), y(image_height);
  for (const Transform& t : geometric_) {
    Status st = std::visit(Overloaded{[&](const RandomResizedCrop& c) -> Status {
                                        if (x.padded() || y.padded()) return resize_after_padding();
                                        const CropBox box = random_resized_crop_box(x.out_length, y.out_length, c, rng);
                                        x.crop(box.x, box.width);
                                        y.crop(box.y, box.height);
                                        x.resize(c.width);
                                        y.resize(c.height);
                                        return Status::ok();
                                      },
                                      [&](const Resize& r) -> Status {
                                        if (x.padded() || y.padded()) return resize_after_padding();
                                        int w = r.width, h = r.height;
                                        if (r.width == 0) {  // shorter side to r.height, like torchvision Resize(int)
                                          const int shorter = std::min(x.out_length, y.out_length);
                                          const int longer = std::max(x.out_length, y.out_length);
                                          const int new_long =
                                              static_cast<int>(static_cast<double>(r.height) * longer / shorter);
                                          if (x.out_length <= y.out_length) {
                                            w = r.height, h = new_long;
                                          } else {
                                            w = new_long, h = r.height;
                                          }
                                        }
                                        x.resize(w);
                                        y.resize(h);
                                        return Status::ok();
                                      },
                                      [&](const CenterCrop& c) -> Status {
                                        // torchvision's center_crop: an axis shorter than the crop is first padded with
                                        // zeros, (crop - size) // 2 before and the rest after; then the crop starts at
                                        // round((size - crop) / 2) (0 on a padded axis).
                                        if (c.width > x.size())
                                          x.pad((c.width - x.size()) / 2, (c.width - x.size() + 1) / 2);
                                        if (c.height > y.size())
                                          y.pad((c.height - y.size()) / 2, (c.height - y.size() + 1) / 2);
                                        if (!x.crop(round_half_even((x.size() - c.width) / 2.0), c.width) ||
                                            !y.crop(round_half_even((y.size() - c.height) / 2.0), c.height))
                                          return unsupported("CenterCrop " + size_text(c.width, c.height) +
                                                             " keeps only the padding of an earlier CenterCrop");
                                        return Status::ok();
                                      },
                                      [](const auto&) -> Status { return Status::ok(); }},
                           t);
    CHUTE_RETURN_IF_ERROR(st);
  }
  CHUTE_CHECK(x.size() == out_width_ && y.size() == out_height_);
  SamplePlan plan;
  plan.pad_left = x.pad_before, plan.pad_right = x.pad_after;
  plan.pad_top = y.pad_before, plan.pad_bottom = y.pad_after;
  if (x.resized >= 0) {
    // Pillow's Image.resize: factor = int(length / size / reducing_gap) per axis. libjpeg scales both axes
    // alike, by a power of two: the largest one within both axes' factors.
    const auto factor = [reducing_gap](const Axis& a) {
      return static_cast<double>(a.length) / a.resized / reducing_gap;
    };
    for (int d = 8; d >= 2; d /= 2) {
      if (d <= max_reduction && factor(x) >= d && factor(y) >= d) {
        plan.reduction = d;
        break;
      }
    }
  }
  if (plan.reduction == 1) {
    plan.xs = AxisCoeffs::bilinear(x.length, x.resized < 0 ? x.length : x.resized, x.out_offset, x.out_length);
    plan.ys = AxisCoeffs::bilinear(y.length, y.resized < 0 ? y.length : y.resized, y.out_offset, y.out_length);
    plan.window_x = x.offset + plan.xs.input_begin();
    plan.window_y = y.offset + plan.ys.input_begin();
  } else {
    // The source range in the reduced image (libjpeg rounds its size up), resampled with Pillow's box.
    const int d = plan.reduction;
    const int reduced_w = (image_width + d - 1) / d, reduced_h = (image_height + d - 1) / d;
    plan.xs = AxisCoeffs::bilinear_box(reduced_w, static_cast<double>(x.offset) / d,
                                       std::min<double>(reduced_w, static_cast<double>(x.offset + x.length) / d),
                                       x.resized, x.out_offset, x.out_length);
    plan.ys = AxisCoeffs::bilinear_box(reduced_h, static_cast<double>(y.offset) / d,
                                       std::min<double>(reduced_h, static_cast<double>(y.offset + y.length) / d),
                                       y.resized, y.out_offset, y.out_length);
    plan.window_x = plan.xs.input_begin();
    plan.window_y = plan.ys.input_begin();
    // The passes are ordered by the reduced box's shrink (bilinear_box), as Pillow orders them when it
    // resizes from draft()'s box: the pixels are those of Image.draft + Image.resize(box=...).
  }
  plan.window_width = plan.xs.input_end() - plan.xs.input_begin();
  plan.window_height = plan.ys.input_end() - plan.ys.input_begin();
  plan.xs.rebase(plan.xs.input_begin());
  plan.ys.rebase(plan.ys.input_begin());
  plan.flip = flip_ && rng.uniform() < flip_->p;
  return plan;
}

}  // namespace chute
