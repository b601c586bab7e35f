// Pillow's colour operations as torchvision's functional_pil calls them (ImageEnhance, ImageOps, the
// HSV conversions), step for step: Blend.c's float32 blend, Filter.c's 3x3 SMOOTH kernel, Convert.c's
// luma and HSV, ImageOps' lookup tables (Image.point clips their entries to [0, 255]).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "transform/detail/pil_ops.h"
#include "transform/detail/simd_clones.h"

namespace chute::detail {
namespace {

// ImagingBlend in place: image = degenerate + alpha * (image - degenerate) in float32, truncated. Pillow
// clips only when alpha is outside [0, 1]; inside, the value cannot leave [0, 255] (the float steps are
// monotonic), so one branch-free clamp serves both loops.
CHUTE_SIMD_CLONES
void blend(const uint8_t* degenerate, uint8_t* image, size_t n, float alpha) {
  for (size_t i = 0; i < n; ++i) {
    float v = static_cast<float>(degenerate[i]) +
              alpha * static_cast<float>(static_cast<int>(image[i]) - static_cast<int>(degenerate[i]));
    v = v < 0.0f ? 0.0f : v;
    v = v > 255.0f ? 255.0f : v;
    image[i] = static_cast<uint8_t>(v);
  }
}

// The same with one grey level as the degenerate (Brightness: black; Contrast: the mean).
CHUTE_SIMD_CLONES
void blend(int degenerate, uint8_t* image, size_t n, float alpha) {
  const float base = static_cast<float>(degenerate);
  for (size_t i = 0; i < n; ++i) {
    float v = base + alpha * static_cast<float>(static_cast<int>(image[i]) - degenerate);
    v = v < 0.0f ? 0.0f : v;
    v = v > 255.0f ? 255.0f : v;
    image[i] = static_cast<uint8_t>(v);
  }
}

// Filter.c's 3x3 kernel on the interior bytes of rows 1 .. height - 2 (RGB: the neighbours are 3 bytes
// apart): ss = 0.5; ss += KERNEL1x3(row y + 1); += KERNEL1x3(row y); += KERNEL1x3(row y - 1); clip8.
CHUTE_SIMD_CLONES
void smooth_rows(const uint8_t* rgb, size_t pitch, int height, uint8_t* smooth) {
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;  // _imaging.c divides the kernel by the divisor in float
  for (int y = 1; y < height - 1; ++y) {
    const uint8_t* above = rgb + (y - 1) * pitch;
    const uint8_t* row = rgb + y * pitch;
    const uint8_t* below = rgb + (y + 1) * pitch;
    uint8_t* out = smooth + y * pitch;
    for (size_t x = 3; x < pitch - 3; ++x) {
      float ss = 0.5f;
      ss += static_cast<float>(below[x - 3]) * k1 + static_cast<float>(below[x]) * k1 +
            static_cast<float>(below[x + 3]) * k1;
      ss += static_cast<float>(row[x - 3]) * k1 + static_cast<float>(row[x]) * k5 + static_cast<float>(row[x + 3]) * k1;
      ss += static_cast<float>(above[x - 3]) * k1 + static_cast<float>(above[x]) * k1 +
            static_cast<float>(above[x + 3]) * k1;
      ss = ss < 0.0f ? 0.0f : ss;
      ss = ss > 255.0f ? 255.0f : ss;
      out[x] = static_cast<uint8_t>(ss);
    }
  }
}

void apply_lut(uint8_t* rgb, size_t pixels, const uint8_t (&lut)[3][256]) {
  for (size_t i = 0; i < pixels; ++i, rgb += 3) {
    rgb[0] = lut[0][rgb[0]];
    rgb[1] = lut[1][rgb[1]];
    rgb[2] = lut[2][rgb[2]];
  }
}

void apply_lut(uint8_t* rgb, size_t pixels, const uint8_t (&lut)[256]) {
  for (size_t i = 0; i < pixels * 3; ++i) rgb[i] = lut[rgb[i]];
}

void histograms(const uint8_t* rgb, size_t pixels, uint32_t (&h)[3][256]) {
  std::memset(h, 0, sizeof h);
  for (size_t i = 0; i < pixels; ++i, rgb += 3) {
    ++h[0][rgb[0]];
    ++h[1][rgb[1]];
    ++h[2][rgb[2]];
  }
}

// Convert.c's rgb2hsv_row (its float and double steps kept).
void rgb_to_hsv(const uint8_t* in, uint8_t* out) {
  const uint8_t r = in[0], g = in[1], b = in[2];
  const uint8_t maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  uint8_t uh = 0, us = 0;
  if (minc != maxc) {
    const float cr = static_cast<float>(maxc - minc);
    const float s = cr / static_cast<float>(maxc);
    const float rc = static_cast<float>(maxc - r) / cr;
    const float gc = static_cast<float>(maxc - g) / cr;
    const float bc = static_cast<float>(maxc - b) / cr;
    float h;
    if (r == maxc) {
      h = bc - gc;
    } else if (g == maxc) {
      h = static_cast<float>(2.0 + rc - bc);
    } else {
      h = static_cast<float>(4.0 + gc - rc);
    }
    h = static_cast<float>(std::fmod(h / 6.0 + 1.0, 1.0));
    uh = static_cast<uint8_t>(std::clamp(static_cast<int>(h * 255.0), 0, 255));
    us = static_cast<uint8_t>(std::clamp(static_cast<int>(s * 255.0), 0, 255));
  }
  out[0] = uh;
  out[1] = us;
  out[2] = maxc;
}

// Convert.c's hsv2rgb for one pixel.
void hsv_to_rgb(const uint8_t* in, uint8_t* out) {
  const uint8_t h = in[0], s = in[1], v = in[2];
  if (s == 0) {
    out[0] = out[1] = out[2] = v;
    return;
  }
  const int i = static_cast<int>(std::floor(static_cast<float>(h) * 6.0 / 255.0));
  const float f = static_cast<float>(static_cast<float>(h) * 6.0 / 255.0 - static_cast<float>(i));
  const float fs = static_cast<float>(static_cast<float>(s) / 255.0);
  const auto clip8 = [](double x) { return static_cast<uint8_t>(std::clamp(static_cast<int>(x), 0, 255)); };
  const uint8_t p = clip8(std::round(static_cast<float>(v) * (1.0 - fs)));
  const uint8_t q = clip8(std::round(static_cast<float>(v) * (1.0 - fs * f)));
  const uint8_t t = clip8(std::round(static_cast<float>(v) * (1.0 - fs * (1.0 - f))));
  switch (i % 6) {
    case 0:
      out[0] = v, out[1] = t, out[2] = p;
      break;
    case 1:
      out[0] = q, out[1] = v, out[2] = p;
      break;
    case 2:
      out[0] = p, out[1] = v, out[2] = t;
      break;
    case 3:
      out[0] = p, out[1] = q, out[2] = v;
      break;
    case 4:
      out[0] = t, out[1] = p, out[2] = v;
      break;
    default:
      out[0] = v, out[1] = p, out[2] = q;
      break;
  }
}

}  // namespace

void pil_brightness(uint8_t* rgb, size_t pixels, double factor) {
  blend(0, rgb, pixels * 3, static_cast<float>(factor));  // black; _imaging.c passes (float)alpha
}

void pil_contrast(uint8_t* rgb, size_t pixels, double factor) {
  // The degenerate is the mean of convert("L"), int(mean + 0.5) (ImageStat: an exact integer sum / count).
  uint64_t sum = 0;
  const uint8_t* p = rgb;
  for (size_t i = 0; i < pixels; ++i, p += 3) sum += pil_luma(p);
  const double mean = pixels ? static_cast<double>(sum) / static_cast<double>(pixels) : 0.0;
  blend(static_cast<int>(mean + 0.5), rgb, pixels * 3, static_cast<float>(factor));
}

void pil_color(uint8_t* rgb, size_t pixels, double factor, std::vector<uint8_t>& spare) {
  // The degenerate is convert("L").convert("RGB"): each pixel's luma in all three channels.
  spare.resize(pixels * 3);
  uint8_t* grey = spare.data();
  for (size_t i = 0; i < pixels; ++i) grey[i * 3] = grey[i * 3 + 1] = grey[i * 3 + 2] = pil_luma(rgb + i * 3);
  blend(grey, rgb, pixels * 3, static_cast<float>(factor));
}

void pil_sharpness(uint8_t* rgb, int width, int height, double factor, std::vector<uint8_t>& spare) {
  // The degenerate is image.filter(SMOOTH): the 3x3 kernel [1 1 1; 1 5 1; 1 1 1] / 13 in float (Filter.c),
  // the border pixels copied (so they come out unchanged); an image under 3x3 is its own degenerate.
  if (width < 3 || height < 3) return;
  const size_t pitch = static_cast<size_t>(width) * 3;
  spare.assign(rgb, rgb + pitch * height);  // the border
  smooth_rows(rgb, pitch, height, spare.data());
  blend(spare.data(), rgb, pitch * height, static_cast<float>(factor));
}

void pil_hue(uint8_t* rgb, size_t pixels, double factor) {
  // np_h += np.int32(hue_factor * 255).astype(np.uint8): truncated toward zero, then wrapped.
  const uint8_t shift = static_cast<uint8_t>(static_cast<int32_t>(factor * 255));
  for (size_t i = 0; i < pixels; ++i, rgb += 3) {
    uint8_t hsv[3];
    rgb_to_hsv(rgb, hsv);
    hsv[0] = static_cast<uint8_t>(hsv[0] + shift);
    hsv_to_rgb(hsv, rgb);
  }
}

void pil_grayscale(uint8_t* rgb, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, rgb += 3) rgb[0] = rgb[1] = rgb[2] = pil_luma(rgb);
}

void pil_autocontrast(uint8_t* rgb, size_t pixels) {
  // ImageOps.autocontrast(cutoff=0): per band, lo and hi are the lowest and highest levels present;
  // lut[i] = int(i * scale + offset) with scale = 255 / (hi - lo), offset = -lo * scale, clamped.
  uint32_t h[3][256];
  histograms(rgb, pixels, h);
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    int lo = 0, hi = 255;
    while (lo < 255 && !h[c][lo]) ++lo;
    while (hi > 0 && !h[c][hi]) --hi;
    if (hi <= lo) {
      for (int i = 0; i < 256; ++i) lut[c][i] = static_cast<uint8_t>(i);
      continue;
    }
    const double scale = 255.0 / (hi - lo);
    const double offset = -lo * scale;
    for (int i = 0; i < 256; ++i) {
      const int v = static_cast<int>(i * scale + offset);
      lut[c][i] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
  }
  apply_lut(rgb, pixels, lut);
}

void equalize(uint8_t* rgb, size_t pixels) {
  // ImageOps.equalize: step = (sum of the non-empty bins but the last) // 255; lut[i] = (step // 2 +
  // pixels below level i) // step, clipped by Image.point. torchvision's tensor _scale_channel computes
  // the same integers.
  uint32_t h[3][256];
  histograms(rgb, pixels, h);
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    uint64_t total = 0, last = 0;
    int nonzero = 0;
    for (int i = 0; i < 256; ++i) {
      if (h[c][i]) {
        total += h[c][i];
        last = h[c][i];
        ++nonzero;
      }
    }
    const uint64_t step = nonzero <= 1 ? 0 : (total - last) / 255;
    if (step == 0) {
      for (int i = 0; i < 256; ++i) lut[c][i] = static_cast<uint8_t>(i);
      continue;
    }
    uint64_t n = step / 2;
    for (int i = 0; i < 256; ++i) {
      lut[c][i] = static_cast<uint8_t>(std::min<uint64_t>(n / step, 255));
      n += h[c][i];
    }
  }
  apply_lut(rgb, pixels, lut);
}

void posterize(uint8_t* rgb, size_t pixels, int bits) {
  // The low 8 - bits bits cleared: ImageOps.posterize's mask ~(2 ** (8 - bits) - 1), torchvision's
  // img & -(2 ** (8 - bits)) (bits = 0 clears every bit).
  const uint8_t mask = static_cast<uint8_t>(~((1u << (8 - bits)) - 1u));
  for (size_t i = 0; i < pixels * 3; ++i) rgb[i] &= mask;
}

void solarize(uint8_t* rgb, size_t pixels, double threshold, bool float32) {
  // PIL compares i < threshold in double; the tensor path img >= threshold in float32.
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) {
    const bool keep = float32 ? static_cast<float>(v) < static_cast<float>(threshold) : v < threshold;
    lut[v] = static_cast<uint8_t>(keep ? v : 255 - v);
  }
  apply_lut(rgb, pixels, lut);
}

void invert(uint8_t* rgb, size_t pixels) {
  for (size_t i = 0; i < pixels * 3; ++i) rgb[i] = static_cast<uint8_t>(255 - rgb[i]);
}

void horizontal_flip(uint8_t* rgb, int width, int height) {
  for (int y = 0; y < height; ++y) {
    uint8_t* row = rgb + static_cast<size_t>(y) * width * 3;
    for (int l = 0, r = width - 1; l < r; ++l, --r) {
      uint8_t t[3];
      std::memcpy(t, row + l * 3, 3);
      std::memcpy(row + l * 3, row + r * 3, 3);
      std::memcpy(row + r * 3, t, 3);
    }
  }
}

}  // namespace chute::detail
