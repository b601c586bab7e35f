// The two passes of resample_rgb, in a portable version and SIMD versions (AVX2; AVX-512 for the
// horizontal pass) that compute the same integers. Internal to resample.cc and resample_avx2.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chute/transform/resample.h"

namespace chute::detail {

// Rows [row0, row0 + rows) of `in`, resampled along x into `out` (rows out_pitch bytes apart).
void horizontal_portable(const uint8_t* in, size_t in_pitch, int row0, int rows, const AxisCoeffs& xs, uint8_t* out,
                         size_t out_pitch);
void horizontal_avx2(const uint8_t* in, size_t in_pitch, int row0, int rows, const AxisCoeffs& xs, uint8_t* out,
                     size_t out_pitch);
// Needs xs.span16_fits.
void horizontal_avx512(const uint8_t* in, size_t in_pitch, int row0, int rows, const AxisCoeffs& xs, uint8_t* out,
                       size_t out_pitch);

// Output rows of ys, each a weighted sum of rows of `in` (row r of `in` is input row row0 + r), of
// `row_bytes` bytes each, into `out` (tightly packed).
void vertical_portable(const uint8_t* in, size_t in_pitch, int row0, const AxisCoeffs& ys, size_t row_bytes,
                       uint8_t* out);
void vertical_avx2(const uint8_t* in, size_t in_pitch, int row0, const AxisCoeffs& ys, size_t row_bytes, uint8_t* out);
void vertical_avx512(const uint8_t* in, size_t in_pitch, int row0, const AxisCoeffs& ys, size_t row_bytes,
                     uint8_t* out);

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> AxisCoeffs::kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

}  // namespace chute::detail
