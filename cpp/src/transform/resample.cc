#include "chute/transform/resample.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string_view>

#include "chute/base/status.h"
#include "transform/detail/resample_kernels.h"

namespace chute {
namespace {

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

enum Kernels : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

Kernels best_kernels() {
  static const Kernels best =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi")
          ? kAvx512
      : __builtin_cpu_supports("avx2") ? kAvx2
                                       : kPortable;
  return best;
}

std::atomic<int> g_kernels{-1};  // -1: the best available
std::atomic<int> g_pass_order{static_cast<int>(ResamplePassOrder::kHorizontalFirst)};

Kernels kernels() {
  const int chosen = g_kernels.load(std::memory_order_relaxed);
  return chosen < 0 ? best_kernels() : static_cast<Kernels>(chosen);
}

}  // namespace

const char* resample_kernels() {
  switch (kernels()) {
    case kAvx512:
      return "avx512";
    case kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool use_resample_kernels(const char* name) {
  const std::string_view n = name ? name : "";
  const int k = n.empty() ? -1 : n == "avx512" ? kAvx512 : n == "avx2" ? kAvx2 : n == "portable" ? kPortable : -2;
  if (k == -2 || k > best_kernels()) return false;
  g_kernels.store(k);
  return true;
}

ResamplePassOrder resample_pass_order() {
  return static_cast<ResamplePassOrder>(g_pass_order.load(std::memory_order_relaxed));
}

void set_resample_pass_order(ResamplePassOrder order) { g_pass_order.store(static_cast<int>(order)); }

bool resample_vertical_first(const AxisCoeffs& xs, const AxisCoeffs& ys) {
  if (resample_pass_order() != ResamplePassOrder::kPillow13 || xs.identity || ys.identity) return false;
  return ys.shrink > 0 && ys.shrink > 2 * xs.shrink;
}

void AxisCoeffs::build_tap_tables() {
  padded_out = (out_size + 15) / 16 * 16;
  weights_by_tap.assign(static_cast<size_t>(taps) * padded_out, 0);
  offsets_by_tap.assign(static_cast<size_t>(taps) * padded_out, 0);
  group_taps.assign(padded_out / 8, 0);
  for (int x = 0; x < out_size; ++x) group_taps[x / 8] = std::max(group_taps[x / 8], count[x]);
  for (int t = 0; t < taps; ++t) {
    for (int x = 0; x < padded_out; ++x) {
      const size_t at = static_cast<size_t>(t) * padded_out + x;
      if (x < out_size && t < count[x]) weights_by_tap[at] = weights[static_cast<size_t>(x) * taps + t];
      const int pixel = x < out_size ? first[x] + t : 0;
      offsets_by_tap[at] = std::min(pixel, in_size - 1) * 3;
    }
  }
  const int groups = padded_out / 16;
  group16_begin.assign(groups, 0);
  group16_bytes.assign(groups, 0);
  group16_taps.assign(groups, 0);
  offsets16.assign(padded_out, 0);
  span16_fits = true;
  for (int g = 0; g < groups; ++g) {
    const int x0 = g * 16, x1 = std::min(out_size, x0 + 16);
    int end = first[x0];
    for (int x = x0; x < x1; ++x) {
      end = std::max(end, first[x] + count[x]);
      offsets16[x] = (first[x] - first[x0]) * 3;
      group16_taps[g] = std::max(group16_taps[g], count[x]);
    }
    group16_begin[g] = first[x0] * 3;
    group16_bytes[g] = (end - first[x0]) * 3;
    span16_fits = span16_fits && group16_bytes[g] <= 128;
  }
}

AxisCoeffs AxisCoeffs::bilinear(int in_size, int resized, int keep_first, int keep_count) {
  return bilinear_box(in_size, 0.0, in_size, resized, keep_first, keep_count);
}

AxisCoeffs AxisCoeffs::bilinear_box(int in_size, double box_begin, double box_end, int resized, int keep_first,
                                    int keep_count) {
  CHUTE_CHECK(in_size > 0 && resized > 0 && keep_first >= 0 && keep_count > 0 && keep_first + keep_count <= resized &&
              box_begin >= 0 && box_end <= in_size && box_begin < box_end);
  AxisCoeffs c;
  c.in_size = in_size;
  c.out_size = keep_count;
  c.identity = box_begin == 0.0 && box_end == in_size && in_size == resized;
  c.shrink = static_cast<int>(std::lround(box_end - box_begin)) - resized;
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
  const double scale = (box_end - box_begin) / resized;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  c.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(keep_count);
  c.count.resize(keep_count);
  c.weights.assign(static_cast<size_t>(keep_count) * c.taps, 0);
  std::vector<double> k(c.taps);
  for (int i = 0; i < keep_count; ++i) {
    const int xx = keep_first + i;
    const double center = box_begin + (xx + 0.5) * scale;
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
  c.build_tap_tables();
  return c;
}

int AxisCoeffs::input_begin() const { return *std::min_element(first.begin(), first.end()); }

int AxisCoeffs::input_end() const {
  int end = 0;
  for (size_t i = 0; i < first.size(); ++i) end = std::max(end, first[i] + count[i]);
  return end;
}

void AxisCoeffs::rebase(int offset) {
  in_size = input_end() - offset;  // the decoded window ends where the last tap does
  for (int& f : first) f -= offset;
  if (!identity) build_tap_tables();
}

namespace detail {

void horizontal_portable(const uint8_t* in, size_t in_pitch, int row0, int rows, const AxisCoeffs& xs, uint8_t* out,
                         size_t out_pitch) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* src = in + static_cast<size_t>(row0 + r) * in_pitch;
    uint8_t* dst = out + static_cast<size_t>(r) * out_pitch;
    for (int x = 0; x < xs.out_size; ++x) {
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
}

void vertical_portable(const uint8_t* in, size_t in_pitch, int row0, const AxisCoeffs& ys, size_t row_bytes,
                       uint8_t* out) {
  for (int y = 0; y < ys.out_size; ++y) {
    const int32_t* k = &ys.weights[static_cast<size_t>(y) * ys.taps];
    const uint8_t* base = in + static_cast<size_t>(ys.first[y] - row0) * in_pitch;
    uint8_t* dst = out + static_cast<size_t>(y) * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) {
      int32_t acc = 1 << (AxisCoeffs::kPrecisionBits - 1);
      for (int t = 0; t < ys.count[y]; ++t) acc += base[t * in_pitch + i] * k[t];
      dst[i] = clip8(acc);
    }
  }
}

}  // namespace detail

// Pillow's ImagingResample: horizontal pass over the rows the vertical pass needs, then vertical pass, or
// (resample_vertical_first) vertical pass over the columns the horizontal pass needs, then horizontal
// pass; a pass whose axis keeps its size is skipped.
void resample_rgb(const uint8_t* in, size_t in_pitch, const AxisCoeffs& xs, const AxisCoeffs& ys, uint8_t* out,
                  ResampleScratch& scratch) {
  const Kernels k = kernels();
  const auto vertical = k == kAvx512 ? detail::vertical_avx512
                        : k >= kAvx2 ? detail::vertical_avx2
                                     : detail::vertical_portable;
  const size_t row_bytes = static_cast<size_t>(xs.out_size) * 3;
  if (xs.identity && ys.identity) {
    for (int y = 0; y < ys.out_size; ++y)
      std::memcpy(out + y * row_bytes, in + static_cast<size_t>(ys.first[y]) * in_pitch + xs.first[0] * 3, row_bytes);
    return;
  }
  if (xs.identity) {  // vertical only, straight from the input
    vertical(in + xs.first[0] * 3, in_pitch, 0, ys, row_bytes, out);
    return;
  }
  const auto horizontal = k == kAvx512 && xs.span16_fits ? detail::horizontal_avx512
                          : k >= kAvx2                   ? detail::horizontal_avx2
                                                         : detail::horizontal_portable;
  if (ys.identity) {  // horizontal only: rows ys.first[0].. straight into the output
    horizontal(in, in_pitch, ys.first[0], ys.out_size, xs, out, row_bytes);
    return;
  }
  if (resample_vertical_first(xs, ys)) {
    // Columns [0, x_end) of the kept rows, packed, then read by the horizontal pass as its input image
    // (padded as resample_rgb's own input is).
    const size_t between_pitch = static_cast<size_t>(xs.input_end()) * 3;
    scratch.between_passes.resize(static_cast<size_t>(ys.out_size) * between_pitch + kResampleInputPadding);
    vertical(in, in_pitch, 0, ys, between_pitch, scratch.between_passes.data());
    horizontal(scratch.between_passes.data(), between_pitch, 0, ys.out_size, xs, out, row_bytes);
    return;
  }
  const int y_begin = ys.input_begin(), y_end = ys.input_end();
  scratch.between_passes.resize(static_cast<size_t>(y_end - y_begin) * row_bytes);
  horizontal(in, in_pitch, y_begin, y_end - y_begin, xs, scratch.between_passes.data(), row_bytes);
  vertical(scratch.between_passes.data(), row_bytes, y_begin, ys, row_bytes, out);
}

}  // namespace chute
