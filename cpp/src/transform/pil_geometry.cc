// Pillow's Image.transform(AFFINE) and Image.rotate on RGB images, step for step (Geometry.c and
// Image.py of Pillow 13). Pillow keeps RGB as 4-byte pixels; here they are 3 bytes, which changes no value.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "transform/detail/pil_ops.h"

namespace chute::detail {
namespace {

// Geometry.c's COORD and FLOOR.
inline int coord(double v) { return v < 0.0 ? -1 : static_cast<int>(v); }
inline int floor_int(double v) { return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v); }

inline void copy_pixel(const uint8_t* src, int width, int x, int y, uint8_t* out) {
  std::memcpy(out, src + (static_cast<size_t>(y) * width + x) * 3, 3);
}

void fill_image(uint8_t* dst, size_t pixels, Rgb fill) {
  if (fill[0] == fill[1] && fill[1] == fill[2]) {
    std::memset(dst, fill[0], pixels * 3);
    return;
  }
  for (size_t i = 0; i < pixels; ++i) std::memcpy(dst + i * 3, fill.data(), 3);
}

// ImagingScaleAffine: no rotation or shear (a[1] == a[3] == 0). Input columns are tabulated by stepping
// the coordinate (the sums accumulate, as Pillow's do).
void scale_affine(const uint8_t* src, int width, int height, const std::array<double, 6>& a, uint8_t* dst) {
  // Pillow callocs this table per call; a 224-wide image needs 896 bytes, on the stack below.
  int stack_table[1024];
  std::unique_ptr<int[]> heap_table;
  int* xintab = stack_table;
  if (width > 1024) {
    heap_table = std::make_unique<int[]>(static_cast<size_t>(width));
    xintab = heap_table.get();
  }
  double xo = a[2] + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5;
  int xmin = width, xmax = 0;
  for (int x = 0; x < width; ++x) {
    const int xin = coord(xo);
    if (xin >= 0 && xin < width) {
      xmax = x + 1;
      if (x < xmin) xmin = x;
      xintab[x] = xin;
    }
    xo += a[0];
  }
  for (int y = 0; y < height; ++y) {
    const int yi = coord(yo);
    if (yi >= 0 && yi < height) {
      const uint8_t* in = src + static_cast<size_t>(yi) * width * 3;
      uint8_t* out = dst + static_cast<size_t>(y) * width * 3;
      for (int x = xmin; x < xmax; ++x) std::memcpy(out + x * 3, in + xintab[x] * 3, 3);
    }
    yo += a[4];
  }
}

bool check_fixed(const std::array<double, 6>& a, int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// affine_fixed: nearest neighbour in 16.16 fixed point.
void affine_fixed(const uint8_t* src, int width, int height, const std::array<double, 6>& a, uint8_t* dst) {
  const auto fix = [](double v) { return floor_int(v * 65536.0 + 0.5); };
  const int a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
  int a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
  int a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
  for (int y = 0; y < height; ++y) {
    int xx = a2, yy = a5;
    uint8_t* out = dst + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x, out += 3) {
      const int xin = xx >> 16;
      if (xin >= 0 && xin < width) {
        const int yin = yy >> 16;
        if (yin >= 0 && yin < height) copy_pixel(src, width, xin, yin, out);
      }
      xx += a0;
      yy += a3;
    }
    a2 += a1;
    a5 += a4;
  }
}

// The float loop of ImagingTransformAffine, for matrices beyond the fixed-point range.
void affine_float(const uint8_t* src, int width, int height, const std::array<double, 6>& a, uint8_t* dst) {
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int y = 0; y < height; ++y) {
    double xx = xo, yy = yo;
    uint8_t* out = dst + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x, out += 3) {
      const int xin = coord(xx);
      if (xin >= 0 && xin < width) {
        const int yin = coord(yy);
        if (yin >= 0 && yin < height) copy_pixel(src, width, xin, yin, out);
      }
      xx += a[0];
      yy += a[3];
    }
    xo += a[1];
    yo += a[4];
  }
}

// ImagingGenericTransform with affine_transform and bilinear_filter32RGB.
void affine_bilinear(const uint8_t* src, int width, int height, const std::array<double, 6>& a, uint8_t* dst) {
  const auto xclip = [width](int x) { return x < 0 ? 0 : x < width ? x : width - 1; };
  const auto yclip = [height](int y) { return y < 0 ? 0 : y < height ? y : height - 1; };
  const size_t pitch = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    uint8_t* out = dst + y * pitch;
    for (int x = 0; x < width; ++x, out += 3) {
      const double xin0 = x + 0.5, yin0 = y + 0.5;
      double xin = a[0] * xin0 + a[1] * yin0 + a[2];
      double yin = a[3] * xin0 + a[4] * yin0 + a[5];
      if (xin < 0.0 || xin >= width || yin < 0.0 || yin >= height) continue;  // the fill stays
      xin -= 0.5;
      yin -= 0.5;
      const int xi = floor_int(xin), yi = floor_int(yin);
      const double dx = xin - xi, dy = yin - yi;
      const uint8_t* row0 = src + yclip(yi) * pitch;
      const bool has_row1 = yi + 1 >= 0 && yi + 1 < height;
      const uint8_t* row1 = has_row1 ? src + (yi + 1) * pitch : row0;
      const int x0 = xclip(xi) * 3, x1 = xclip(xi + 1) * 3;
      for (int b = 0; b < 3; ++b) {
        double v1 = row0[x0 + b] + (row0[x1 + b] - row0[x0 + b]) * dx;
        double v2 = v1;
        if (has_row1) v2 = row1[x0 + b] + (row1[x1 + b] - row1[x0 + b]) * dx;
        v1 = v1 + (v2 - v1) * dy;
        out[b] = static_cast<uint8_t>(v1);
      }
    }
  }
}

// Python's round(x, 15): the double nearest to x's correctly rounded 15-decimal value (glibc's printf
// and strtod are correctly rounded, as CPython's dtoa is).
double python_round15(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15f", x);
  return std::strtod(buf, nullptr);
}

enum class Turn { k90, k180, k270 };

// Image.transpose(ROTATE_90 / ROTATE_180 / ROTATE_270): counter-clockwise quarter turns (90 and 270 on
// a square image only, as Image.rotate uses them).
void transpose(const uint8_t* src, int width, int height, Turn turn, uint8_t* dst) {
  for (int y = 0; y < height; ++y) {
    uint8_t* out = dst + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x, out += 3) {
      switch (turn) {
        case Turn::k90:
          copy_pixel(src, width, width - 1 - y, x, out);
          break;
        case Turn::k180:
          copy_pixel(src, width, width - 1 - x, height - 1 - y, out);
          break;
        case Turn::k270:
          copy_pixel(src, width, y, height - 1 - x, out);
          break;
      }
    }
  }
}

}  // namespace

Rgb pil_fill(const Fill& fill) {
  if (!fill) return {0, 0, 0};
  Rgb rgb{};
  for (int c = 0; c < 3; ++c) {
    const double v = std::trunc((*fill)[c]);  // int(x)
    rgb[c] = static_cast<uint8_t>(v < 0.0 ? 0.0 : v > 255.0 ? 255.0 : v);
  }
  return rgb;
}

void pil_affine(const uint8_t* src, int width, int height, const std::array<double, 6>& a, Interpolation interpolation,
                Rgb fill, uint8_t* dst) {
  fill_image(dst, static_cast<size_t>(width) * height, fill);  // Image.new(mode, size, fillcolor)
  if (interpolation == Interpolation::kBilinear) return affine_bilinear(src, width, height, a, dst);
  if (a[1] == 0 && a[3] == 0) return scale_affine(src, width, height, a, dst);
  if (check_fixed(a, 0, 0) && check_fixed(a, width, height) && check_fixed(a, 0, height) && check_fixed(a, width, 0))
    return affine_fixed(src, width, height, a, dst);
  affine_float(src, width, height, a, dst);
}

namespace {
// Python's angle % 360.0 (float_rem: the result takes the divisor's sign).
double modulo_360(double angle) {
  angle = std::fmod(angle, 360.0);
  return angle != 0.0 && angle < 0.0 ? angle + 360.0 : angle;
}
}  // namespace

bool quarter_turn(double angle, const std::optional<std::array<double, 2>>& center, int width, int height) {
  angle = modulo_360(angle);
  return !center && (angle == 0 || angle == 180 || ((angle == 90 || angle == 270) && width == height));
}

void turn(const uint8_t* src, int width, int height, double angle, uint8_t* dst) {
  angle = modulo_360(angle);
  if (angle == 0) {
    std::memcpy(dst, src, static_cast<size_t>(width) * height * 3);
    return;
  }
  transpose(src, width, height, angle == 90 ? Turn::k90 : angle == 180 ? Turn::k180 : Turn::k270, dst);
}

void pil_rotate(const uint8_t* src, int width, int height, double angle,
                const std::optional<std::array<double, 2>>& center, Interpolation interpolation, Rgb fill,
                uint8_t* dst) {
  if (quarter_turn(angle, center, width, height)) return turn(src, width, height, angle, dst);
  angle = modulo_360(angle);
  const double cx = center ? (*center)[0] : width / 2.0, cy = center ? (*center)[1] : height / 2.0;
  const double rad = -(angle * (M_PI / 180.0));  // -math.radians(angle)
  std::array<double, 6> m = {python_round15(std::cos(rad)),  python_round15(std::sin(rad)), 0.0,
                             python_round15(-std::sin(rad)), python_round15(std::cos(rad)), 0.0};
  // matrix[2], matrix[5] = transform(-center[0], -center[1], matrix); then += center.
  const double x = -cx - 0, y = -cy - 0;
  const double c = m[0] * x + m[1] * y + m[2];
  const double f = m[3] * x + m[4] * y + m[5];
  m[2] = c + cx;
  m[5] = f + cy;
  pil_affine(src, width, height, m, interpolation, fill, dst);
}

}  // namespace chute::detail
