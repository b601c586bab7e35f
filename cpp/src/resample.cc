#include "chute/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "chute/status.h"

namespace chute {
namespace {

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> AxisCoeffs::kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

}  // namespace

AxisCoeffs AxisCoeffs::bilinear(int in_size, int resized, int keep_first, int keep_count) {
  CHUTE_CHECK(in_size > 0 && resized > 0 && keep_first >= 0 && keep_count > 0 &&
              keep_first + keep_count <= resized);
  AxisCoeffs c;
  c.in_size = in_size;
  c.out_size = keep_count;
  c.identity = in_size == resized;
  if (c.identity) {  // one tap of weight 1: used only to describe the input range
    c.taps = 1;
    for (int i = 0; i < keep_count; ++i) {
      c.first.push_back(keep_first + i);
      c.count.push_back(1);
      c.weights.push_back(int32_t{1} << kPrecisionBits);
    }
    return c;
  }
  // Pillow's precompute_coeffs, in double precision like Pillow.
  const double scale = static_cast<double>(in_size) / resized;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  c.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(keep_count);
  c.count.resize(keep_count);
  c.weights.assign(static_cast<size_t>(keep_count) * c.taps, 0);
  std::vector<double> k(c.taps);
  for (int i = 0; i < keep_count; ++i) {
    const int xx = keep_first + i;
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = bilinear_filter((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      // Pillow's normalize_coeffs_8bpc: round half away from zero.
      c.weights[static_cast<size_t>(i) * c.taps + x] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    c.first[i] = xmin;
    c.count[i] = xmax;
  }
  return c;
}

int AxisCoeffs::input_begin() const { return *std::min_element(first.begin(), first.end()); }

int AxisCoeffs::input_end() const {
  int end = 0;
  for (size_t i = 0; i < first.size(); ++i) end = std::max(end, first[i] + count[i]);
  return end;
}

void AxisCoeffs::rebase(int offset) {
  for (int& f : first) f -= offset;
  in_size -= offset;
}

void resample_rgb(const uint8_t* in, size_t in_pitch, const AxisCoeffs& xs, const AxisCoeffs& ys,
                  uint8_t* out, ResampleScratch& scratch) {
  const int out_w = xs.out_size, out_h = ys.out_size;
  // Rows of the input that the vertical pass reads.
  const int y_begin = ys.input_begin(), y_end = ys.input_end();

  // Horizontal pass (or a plain copy of the needed columns when this axis keeps its size).
  const size_t h_pitch = static_cast<size_t>(out_w) * 3;
  uint8_t* h_out;
  size_t h_out_pitch;
  int h_row0;  // input row that h_out's first row corresponds to
  if (xs.identity && ys.identity) {
    for (int y = 0; y < out_h; ++y)
      std::memcpy(out + y * h_pitch, in + static_cast<size_t>(ys.first[y]) * in_pitch + xs.first[0] * 3, h_pitch);
    return;
  }
  if (xs.identity) {
    h_out = const_cast<uint8_t*>(in) + xs.first[0] * 3;  // read-only below
    h_out_pitch = in_pitch;
    h_row0 = 0;
  } else {
    const int rows = ys.identity ? out_h : y_end - y_begin;
    const int row0 = ys.identity ? 0 : y_begin;
    uint8_t* dst_base = out;
    if (!ys.identity) {
      scratch.horizontal.resize(static_cast<size_t>(rows) * h_pitch);
      dst_base = scratch.horizontal.data();
    }
    for (int r = 0; r < rows; ++r) {
      const int src_row = ys.identity ? ys.first[r] : row0 + r;
      const uint8_t* src = in + static_cast<size_t>(src_row) * in_pitch;
      uint8_t* dst = dst_base + static_cast<size_t>(r) * h_pitch;
      for (int x = 0; x < out_w; ++x) {
        const int32_t* k = &xs.weights[static_cast<size_t>(x) * xs.taps];
        const uint8_t* p = src + static_cast<size_t>(xs.first[x]) * 3;
        int32_t s0 = 1 << (AxisCoeffs::kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int t = 0; t < xs.count[x]; ++t) {
          s0 += p[3 * t + 0] * k[t];
          s1 += p[3 * t + 1] * k[t];
          s2 += p[3 * t + 2] * k[t];
        }
        dst[3 * x + 0] = clip8(s0);
        dst[3 * x + 1] = clip8(s1);
        dst[3 * x + 2] = clip8(s2);
      }
    }
    if (ys.identity) return;
    h_out = scratch.horizontal.data();
    h_out_pitch = h_pitch;
    h_row0 = row0;
  }

  // Vertical pass: each output row is a weighted sum of rows of h_out.
  const size_t row_bytes = static_cast<size_t>(out_w) * 3;
  std::vector<int32_t>& acc = scratch.accumulator;
  acc.resize(row_bytes);
  for (int y = 0; y < out_h; ++y) {
    const int32_t* k = &ys.weights[static_cast<size_t>(y) * ys.taps];
    std::fill(acc.begin(), acc.end(), 1 << (AxisCoeffs::kPrecisionBits - 1));
    for (int t = 0; t < ys.count[y]; ++t) {
      const uint8_t* src = h_out + static_cast<size_t>(ys.first[y] + t - h_row0) * h_out_pitch;
      const int32_t w = k[t];
      for (size_t i = 0; i < row_bytes; ++i) acc[i] += src[i] * w;
    }
    uint8_t* dst = out + static_cast<size_t>(y) * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) dst[i] = clip8(acc[i]);
  }
}

}  // namespace chute
