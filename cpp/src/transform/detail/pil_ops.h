// Pillow's image operations as torchvision's functional_pil calls them, on interleaved RGB uint8 images,
// reproducing Pillow 13's arithmetic step for step (src/libImaging/Geometry.c, Blend.c, Filter.c,
// Convert.c; PIL/ImageEnhance.py, ImageOps.py). Internal to the pixel stage (pixel_ops.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "chute/transform/pixel_ops.h"

namespace chute::detail {

using Rgb = std::array<uint8_t, 3>;

// torchvision's _parse_fill for an RGB image: None is 0, each value int()ed (then Pillow's ink: clipped).
Rgb pil_fill(const Fill& fill);

// Image.transform(size, Image.AFFINE, data, resample, fillcolor=fill) for a same-size output: `data` maps
// output pixel centres to input coordinates. NEAREST takes Pillow's fast paths (scale-only tables,
// 16.16 fixed point, or the float loop); BILINEAR the generic per-pixel filter.
void pil_affine(const uint8_t* src, int width, int height, const std::array<double, 6>& data,
                Interpolation interpolation, Rgb fill, uint8_t* dst);

// Whether Image.rotate (and v2's tensor rotate) turns by a transpose: 0, 90, 180 or 270 degrees (mod 360)
// about the default centre, 90 and 270 only on a square image; and that transpose (counter-clockwise).
bool quarter_turn(double angle, const std::optional<std::array<double, 2>>& center, int width, int height);
void turn(const uint8_t* src, int width, int height, double angle, uint8_t* dst);

// Image.rotate(angle, resample, expand=False, center, fillcolor=fill): the transposes above, else the
// affine above.
void pil_rotate(const uint8_t* src, int width, int height, double angle,
                const std::optional<std::array<double, 2>>& center, Interpolation interpolation, Rgb fill,
                uint8_t* dst);

// ImageEnhance.<kind>(image).enhance(factor), in place; `spare` holds the sharpness degenerate.
void pil_brightness(uint8_t* rgb, size_t pixels, double factor);
void pil_contrast(uint8_t* rgb, size_t pixels, double factor);
void pil_color(uint8_t* rgb, size_t pixels, double factor, std::vector<uint8_t>& spare);
void pil_sharpness(uint8_t* rgb, int width, int height, double factor, std::vector<uint8_t>& spare);

// functional_pil.adjust_hue: through Pillow's HSV, the hue byte shifted by uint8(int32(factor * 255)).
void pil_hue(uint8_t* rgb, size_t pixels, double factor);
// convert("L") replicated to three channels (functional_pil.to_grayscale(img, 3)).
void pil_grayscale(uint8_t* rgb, size_t pixels);

// ImageOps on an RGB image, in place.
void pil_autocontrast(uint8_t* rgb, size_t pixels);
void equalize(uint8_t* rgb, size_t pixels);  // ImageOps.equalize; the tensor path's is the same integer code
void posterize(uint8_t* rgb, size_t pixels, int bits);
// v >= threshold becomes 255 - v; `float32`: compared as the tensor path does (img >= threshold in float32).
void solarize(uint8_t* rgb, size_t pixels, double threshold, bool float32);
void invert(uint8_t* rgb, size_t pixels);
void horizontal_flip(uint8_t* rgb, int width, int height);

// Pillow's convert("L") of one pixel: ITU-R 601-2 luma in 16.16 fixed point, rounded.
inline uint8_t pil_luma(const uint8_t* p) {
  return static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

}  // namespace chute::detail
