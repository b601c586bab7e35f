// torchvision's functional_tensor ops in torch's float32 arithmetic (see detail/tensor_ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "transform/detail/simd_clones.h"
#include "transform/detail/tensor_ops.h"

namespace chute::detail {
namespace {

// float -> uint8 after torch.round (half to even): _cast_squeeze_out. A value outside [0, 255] (only a
// fill outside it gives one) wraps as torch's conversion through int does.
inline uint8_t round_to_u8(float v) { return static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(v))); }

// _blend in place: img1 = (ratio * img1 + (1.0 - ratio) * img2).clamp(0, 255).to(uint8): two float32
// products, one sum, truncated.
CHUTE_SIMD_CLONES
void blend(uint8_t* img1, const uint8_t* img2, size_t n, float ratio, float one_minus_ratio) {
  for (size_t i = 0; i < n; ++i) {
    float v = ratio * static_cast<float>(img1[i]);
    v = v + one_minus_ratio * static_cast<float>(img2[i]);
    v = v < 0.0f ? 0.0f : v;
    v = v > 255.0f ? 255.0f : v;
    img1[i] = static_cast<uint8_t>(v);
  }
}

// The same against one float (zeros for brightness, the grey mean for contrast).
CHUTE_SIMD_CLONES
void blend(uint8_t* img1, float img2, size_t n, float ratio, float one_minus_ratio) {
  const float b = one_minus_ratio * img2;
  for (size_t i = 0; i < n; ++i) {
    float v = ratio * static_cast<float>(img1[i]);
    v = v + b;
    v = v < 0.0f ? 0.0f : v;
    v = v > 255.0f ? 255.0f : v;
    img1[i] = static_cast<uint8_t>(v);
  }
}

// conv2d with [1 1 1; 1 5 1; 1 1 1] / 13 on rows 1 .. height - 2, rounded (the products summed row by row,
// as torch's kernel sums them here).
CHUTE_SIMD_CLONES
void blur_rows(const uint8_t* rgb, size_t pitch, int height, uint8_t* blurred) {
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  for (int y = 1; y < height - 1; ++y) {
    const uint8_t* above = rgb + (y - 1) * pitch;
    const uint8_t* row = rgb + y * pitch;
    const uint8_t* below = rgb + (y + 1) * pitch;
    uint8_t* out = blurred + y * pitch;
    for (size_t x = 3; x < pitch - 3; ++x) {
      float s = k1 * above[x - 3];
      s += k1 * above[x];
      s += k1 * above[x + 3];
      s += k1 * row[x - 3];
      s += k5 * row[x];
      s += k1 * row[x + 3];
      s += k1 * below[x - 3];
      s += k1 * below[x];
      s += k1 * below[x + 3];
      out[x] = static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(s)));
    }
  }
}

// torchvision's rgb_to_grayscale on a uint8 tensor: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8).
inline uint8_t tensor_luma(const uint8_t* p) {
  float l = 0.2989f * static_cast<float>(p[0]);
  l = l + 0.587f * static_cast<float>(p[1]);
  l = l + 0.114f * static_cast<float>(p[2]);
  return static_cast<uint8_t>(l);
}

// v2's _blend: image1.mul(ratio).add_(image2, alpha=1 - ratio), the add fused (torch's add with alpha is
// one fused multiply-add per element), clamped, truncated. `img2` is a constant when `plane` is null.
CHUTE_SIMD_CLONES_FMA
void blend_fused(uint8_t* img1, const uint8_t* plane, float constant, size_t n, float ratio, float one_minus_ratio) {
  for (size_t i = 0; i < n; ++i) {
    const float b = plane ? static_cast<float>(plane[i]) : constant;
    float v = std::fma(b, one_minus_ratio, ratio * static_cast<float>(img1[i]));
    v = v < 0.0f ? 0.0f : v;
    v = v > 255.0f ? 255.0f : v;
    img1[i] = static_cast<uint8_t>(v);
  }
}

// v2's sharpness: the interior becomes view + (1 - factor) * (blurred - view), fused; the border stays.
CHUTE_SIMD_CLONES_FMA
void sharpen_fused(uint8_t* rgb, const uint8_t* blurred, size_t pitch, int height, float one_minus_factor) {
  for (int y = 1; y < height - 1; ++y) {
    uint8_t* row = rgb + y * pitch;
    const uint8_t* blur = blurred + y * pitch;
    for (size_t x = 3; x < pitch - 3; ++x) {
      const float view = static_cast<float>(row[x]);
      float v = std::fma(static_cast<float>(blur[x]) - view, one_minus_factor, view);
      v = v < 0.0f ? 0.0f : v;
      v = v > 255.0f ? 255.0f : v;
      row[x] = static_cast<uint8_t>(v);
    }
  }
}

// v2's _rgb_to_grayscale_image: r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114), fused, floored
// (or truncated: the same for these values).
inline uint8_t tensor_luma_v2(const uint8_t* p) {
  const float l = std::fma(static_cast<float>(p[2]), 0.114f,
                           std::fma(static_cast<float>(p[1]), 0.587f, 0.2989f * static_cast<float>(p[0])));
  return static_cast<uint8_t>(l);
}

}  // namespace

float torch_linspace(double start, double end, int64_t steps, int64_t i) {
  const float s = static_cast<float>(start), e = static_cast<float>(end);
  if (steps == 1) return s;
  const float step = (e - s) / static_cast<float>(steps - 1);
  if (i < steps / 2) return std::fma(step, static_cast<float>(i), s);
  return std::fma(-step, static_cast<float>(steps - i - 1), e);
}

void tensor_brightness(uint8_t* rgb, size_t pixels, double factor) {
  // _blend(img, zeros_like(img), factor); (1.0 - ratio) is a Python float, rounded to float32 by torch.
  // v2's image.mul(factor).clamp_ gives the same bytes.
  blend(rgb, 0.0f, pixels * 3, static_cast<float>(factor), static_cast<float>(1.0 - factor));
}

void tensor_contrast(uint8_t* rgb, size_t pixels, double factor, TorchvisionApi api) {
  // mean = torch.mean(rgb_to_grayscale(img).to(float32)) (v2: of the floored float grey): the sum is exact
  // while under 2**24 (any image up to 256x256), then one float32 division.
  const bool v2 = api == TorchvisionApi::kV2;
  uint64_t sum = 0;
  const uint8_t* p = rgb;
  for (size_t i = 0; i < pixels; ++i, p += 3) sum += v2 ? tensor_luma_v2(p) : tensor_luma(p);
  const float mean = pixels ? static_cast<float>(sum) / static_cast<float>(pixels) : 0.0f;
  const float r = static_cast<float>(factor), q = static_cast<float>(1.0 - factor);
  v2 ? blend_fused(rgb, nullptr, mean, pixels * 3, r, q) : blend(rgb, mean, pixels * 3, r, q);
}

void tensor_saturation(uint8_t* rgb, size_t pixels, double factor, TorchvisionApi api, std::vector<uint8_t>& spare) {
  const bool v2 = api == TorchvisionApi::kV2;
  spare.resize(pixels * 3);
  uint8_t* grey = spare.data();
  for (size_t i = 0; i < pixels; ++i)
    grey[i * 3] = grey[i * 3 + 1] = grey[i * 3 + 2] = v2 ? tensor_luma_v2(rgb + i * 3) : tensor_luma(rgb + i * 3);
  const float r = static_cast<float>(factor), q = static_cast<float>(1.0 - factor);
  v2 ? blend_fused(rgb, grey, 0.0f, pixels * 3, r, q) : blend(rgb, grey, pixels * 3, r, q);
}

void tensor_grayscale(uint8_t* rgb, size_t pixels, TorchvisionApi api) {
  for (size_t i = 0; i < pixels; ++i, rgb += 3)
    rgb[0] = rgb[1] = rgb[2] = api == TorchvisionApi::kV2 ? tensor_luma_v2(rgb) : tensor_luma(rgb);
}

void tensor_sharpness(uint8_t* rgb, int width, int height, double factor, TorchvisionApi api,
                      std::vector<uint8_t>& spare) {
  // _blurred_degenerate_image: conv2d with [1 1 1; 1 5 1; 1 1 1] / 13, rounded, on the interior; the
  // border is the image's. Images of 2 or fewer rows or columns are returned as they are.
  if (width <= 2 || height <= 2) return;
  const size_t pitch = static_cast<size_t>(width) * 3;
  spare.assign(rgb, rgb + pitch * height);
  blur_rows(rgb, pitch, height, spare.data());
  if (api == TorchvisionApi::kV2)
    return sharpen_fused(rgb, spare.data(), pitch, height, static_cast<float>(1.0 - factor));
  blend(rgb, spare.data(), pitch * height, static_cast<float>(factor), static_cast<float>(1.0 - factor));
}

void tensor_autocontrast(uint8_t* rgb, size_t pixels, TorchvisionApi api) {
  // Per channel: minimum and maximum as float32, scale = 255 / (max - min) (min 0 and scale 1 where that
  // is not finite), ((img - min) * scale).clamp(0, 255) truncated. v2 divides by inv_scale = (max - min) *
  // (1 / 255) instead (min 0 and inv_scale 1 where max == min).
  uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
  for (size_t i = 0; i < pixels; ++i)
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], rgb[i * 3 + c]);
      hi[c] = std::max(hi[c], rgb[i * 3 + c]);
    }
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    float minimum = lo[c];
    // bound / (maximum - minimum): Python's int / tensor is tensor.reciprocal() * 255, two roundings.
    float scale = (1.0f / (static_cast<float>(hi[c]) - minimum)) * 255.0f;
    if (!std::isfinite(scale)) minimum = 0.0f, scale = 1.0f;
    float inv_scale = (static_cast<float>(hi[c]) - static_cast<float>(lo[c])) * static_cast<float>(1.0 / 255);
    if (hi[c] == lo[c]) inv_scale = 1.0f;
    for (int v = 0; v < 256; ++v) {
      float x = api == TorchvisionApi::kV2 ? (static_cast<float>(v) - minimum) / inv_scale
                                           : (static_cast<float>(v) - minimum) * scale;
      x = x < 0.0f ? 0.0f : x > 255.0f ? 255.0f : x;
      lut[c][v] = static_cast<uint8_t>(x);
    }
  }
  for (size_t i = 0; i < pixels; ++i)
    for (int c = 0; c < 3; ++c) rgb[i * 3 + c] = lut[c][rgb[i * 3 + c]];
}

namespace {

// What grid_sample needs: the input, the grid's terms (see tensor_affine) and the fill.
struct GridSample {
  const uint8_t* src;
  int width, height;
  const float* xs;  // the base grid's columns and rows
  const float* ys;
  float r00, r10, r20, r01, r11, r21;  // rescaled theta
  float scale_x, scale_y;              // W / 2, H / 2
  Interpolation interpolation;
  bool fill;
  float fill_value[3];
  TorchvisionApi api;
};

// grid_sample(align_corners=False, zeros padding) over the whole output, with torch's fused steps
// (hardware FMA in the clones that have it; the C library's exact fmaf in the baseline).
CHUTE_SIMD_CLONES_FMA
void sample_grid(const GridSample& g, uint8_t* dst) {
  const uint8_t* src = g.src;
  const int width = g.width, height = g.height;
  const bool fill = g.fill;
  const float* fill_value = g.fill_value;
  const size_t pitch = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    uint8_t* out = dst + y * pitch;
    for (int x = 0; x < width; ++x, out += 3) {
      const float gx = (g.xs[x] * g.r00 + g.ys[y] * g.r10) + g.r20;
      const float gy = (g.xs[x] * g.r01 + g.ys[y] * g.r11) + g.r21;
      const float ix = std::fma(gx + 1.0f, g.scale_x, -0.5f);
      const float iy = std::fma(gy + 1.0f, g.scale_y, -0.5f);
      if (g.interpolation == Interpolation::kNearest) {
        const float nx = std::nearbyint(ix), ny = std::nearbyint(iy);
        const bool inside = nx >= 0 && nx < width && ny >= 0 && ny < height;
        if (inside) {
          std::memcpy(out, src + static_cast<size_t>(ny) * pitch + static_cast<size_t>(nx) * 3, 3);
        } else {
          for (int c = 0; c < 3; ++c) out[c] = fill ? round_to_u8(fill_value[c]) : 0;
        }
        continue;
      }
      const float x_w = std::floor(ix), y_n = std::floor(iy);
      const float w = ix - x_w, e = 1.0f - w, n = iy - y_n, s = 1.0f - n;
      const float weights[4] = {s * e, s * w, n * e, n * w};  // nw, ne, sw, se
      const int x0 = static_cast<int>(x_w), y0 = static_cast<int>(y_n);
      const uint8_t* corner[4] = {};  // a corner outside the image reads zeros (and a mask of 0)
      if (x0 >= 0 && x0 + 1 < width && y0 >= 0 && y0 + 1 < height) {
        corner[0] = src + static_cast<size_t>(y0) * pitch + static_cast<size_t>(x0) * 3;
        corner[1] = corner[0] + 3, corner[2] = corner[0] + pitch, corner[3] = corner[2] + 3;
      } else {
        for (int k = 0; k < 4; ++k) {
          const int cx = x0 + (k & 1), cy = y0 + (k >> 1);
          if (cx >= 0 && cx < width && cy >= 0 && cy < height)
            corner[k] = src + static_cast<size_t>(cy) * pitch + static_cast<size_t>(cx) * 3;
        }
      }
      // (nw_val * nw) + (ne_val * ne) + (sw_val * sw) + (se_val * se), fused from the second term on.
      float mask = 0.0f;
      if (fill) {
        mask = corner[0] ? weights[0] : 0.0f;
        for (int k = 1; k < 4; ++k) mask = std::fma(corner[k] ? 1.0f : 0.0f, weights[k], mask);
      }
      for (int c = 0; c < 3; ++c) {
        float v = corner[0] ? static_cast<float>(corner[0][c]) * weights[0] : 0.0f;
        for (int k = 1; k < 4; ++k) v = std::fma(corner[k] ? static_cast<float>(corner[k][c]) : 0.0f, weights[k], v);
        if (fill && g.api == TorchvisionApi::kV2) {
          v = (v - fill_value[c]) * mask + fill_value[c];  // v2: mask * (img - fill) + fill
        } else if (fill) {
          v = v * mask + (1.0f - mask) * fill_value[c];
        }
        out[c] = round_to_u8(v);
      }
    }
  }
}

}  // namespace

void tensor_affine(const uint8_t* src, int width, int height, const std::array<double, 6>& matrix,
                   Interpolation interpolation, const Fill& fill, TorchvisionApi api, uint8_t* dst,
                   std::vector<float>& grid) {
  // _gen_affine_grid: theta (float32) transposed and divided by (w / 2, h / 2); the base grid holds the
  // output pixel centres relative to the image centre (linspace(-w/2 + 0.5, w/2 - 0.5)); the grid is
  // base @ rescaled_theta (torch's bmm: x * r0 + y * r1, then + r2, each rounded).
  const float theta[6] = {static_cast<float>(matrix[0]), static_cast<float>(matrix[1]), static_cast<float>(matrix[2]),
                          static_cast<float>(matrix[3]), static_cast<float>(matrix[4]), static_cast<float>(matrix[5])};
  const float half_w = static_cast<float>(0.5 * width), half_h = static_cast<float>(0.5 * height);
  const float r00 = theta[0] / half_w, r10 = theta[1] / half_w, r20 = theta[2] / half_w;
  const float r01 = theta[3] / half_h, r11 = theta[4] / half_h, r21 = theta[5] / half_h;
  grid.resize(static_cast<size_t>(width) + height);
  float* xs = grid.data();
  float* ys = grid.data() + width;
  for (int i = 0; i < width; ++i) xs[i] = torch_linspace(-width * 0.5 + 0.5, width * 0.5 + 0.5 - 1, width, i);
  for (int i = 0; i < height; ++i) ys[i] = torch_linspace(-height * 0.5 + 0.5, height * 0.5 + 0.5 - 1, height, i);
  // grid_sample, align_corners=False: ix = (gx + 1) * (W / 2) - 0.5, fused (torch's vectorised kernel); the
  // bilinear corners summed as a chain of fused multiply-adds.
  const float scale_x = static_cast<float>(width) / 2, scale_y = static_cast<float>(height) / 2;
  GridSample g{src,     width,         height,           xs,        ys, r00, r10, r20, r01, r11, r21, scale_x,
               scale_y, interpolation, fill.has_value(), {0, 0, 0}, api};
  if (fill)
    for (int c = 0; c < 3; ++c) g.fill_value[c] = static_cast<float>((*fill)[c]);
  sample_grid(g, dst);
}

void tensor_gaussian_blur(uint8_t* rgb, int width, int height, int kernel_width, int kernel_height, double sigma_x,
                          double sigma_y, TorchvisionApi api, std::vector<float>& rows, std::vector<float>& kernels) {
  // _get_gaussian_kernel1d per axis in float32: x = linspace(-(k-1)/2, (k-1)/2), pdf = exp(-0.5 * (x /
  // sigma)**2), normalised by its sum. The image is padded by reflection (k // 2 each side) and filtered by
  // the outer product of the two kernels, here as two passes (vertical, then horizontal) in float32, then
  // rounded. torch's conv2d sums the 2-D products in its own order; the two differ by rounding only.
  kernels.resize(static_cast<size_t>(kernel_width) + kernel_height);
  // v2 computes the same kernel as softmax(-(x / sigma)**2) over x = linspace(-lim, lim), lim = (k - 1) /
  // (2 sqrt 2): exp(v - max) normalised (max is 0, at the centre).
  const bool v2 = api == TorchvisionApi::kV2;
  const auto make_kernel = [v2](int k, double sigma, float* out) {
    const double half = v2 ? (k - 1) / (2.0 * std::sqrt(2.0)) : (k - 1) * 0.5;
    const float sig = static_cast<float>(sigma);
    float top = -INFINITY;  // softmax's max, subtracted before exp
    for (int i = 0; i < k; ++i) {
      const float x = torch_linspace(-half, half, k, i) / sig;
      out[i] = v2 ? -(x * x) : -0.5f * (x * x);
      top = std::max(top, out[i]);
    }
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += (out[i] = std::exp(v2 ? out[i] - top : out[i]));
    for (int i = 0; i < k; ++i) out[i] /= sum;
  };
  float* kx = kernels.data();
  float* ky = kernels.data() + kernel_width;
  make_kernel(kernel_width, sigma_x, kx);
  make_kernel(kernel_height, sigma_y, ky);
  const auto reflect = [](int i, int n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; };
  const size_t pitch = static_cast<size_t>(width) * 3;
  rows.resize(pitch * height);
  const int ry = kernel_height / 2, rx = kernel_width / 2;
  for (int y = 0; y < height; ++y) {  // vertical pass into floats
    float* out = rows.data() + y * pitch;
    std::fill(out, out + pitch, 0.0f);
    for (int k = 0; k < kernel_height; ++k) {
      const uint8_t* in = rgb + reflect(y + k - ry, height) * pitch;
      const float w = ky[k];
      for (size_t i = 0; i < pitch; ++i) out[i] += w * static_cast<float>(in[i]);
    }
  }
  for (int y = 0; y < height; ++y) {  // horizontal pass, rounded into the image
    const float* in = rows.data() + y * pitch;
    uint8_t* out = rgb + y * pitch;
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) {
        float s = 0.0f;
        for (int k = 0; k < kernel_width; ++k) s += kx[k] * in[reflect(x + k - rx, width) * 3 + c];
        out[x * 3 + c] = round_to_u8(s);
      }
  }
}

}  // namespace chute::detail
