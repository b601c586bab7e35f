// AVX2 versions of the resampling passes; compiled with -mavx2 and called only where the CPU has AVX2.
// They compute exactly the integers of the portable passes: 32-bit products of uint8 pixels and 22-bit
// weights, summed from the same rounding constant, shifted and clamped the same way.
#include <immintrin.h>

#include "transform/detail/resample_kernels.h"

namespace chute::detail {
namespace {

inline __m256i clamp_shift(__m256i acc) {
  const __m256i v = _mm256_srai_epi32(acc, AxisCoeffs::kPrecisionBits);
  return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_setzero_si256()), _mm256_set1_epi32(255));
}

}  // namespace

namespace {

// Accumulates one tap for 8 outputs of one row: the gathered dword of each pixel holds its R, G and B.
inline void tap(const uint8_t* src, __m256i offs, __m256i w, __m256i& ar, __m256i& ag, __m256i& ab) {
  const __m256i byte = _mm256_set1_epi32(0xFF);
  const __m256i px = _mm256_i32gather_epi32(reinterpret_cast<const int*>(src), offs, 1);
  ar = _mm256_add_epi32(ar, _mm256_mullo_epi32(_mm256_and_si256(px, byte), w));
  ag = _mm256_add_epi32(ag, _mm256_mullo_epi32(_mm256_and_si256(_mm256_srli_epi32(px, 8), byte), w));
  ab = _mm256_add_epi32(ab, _mm256_mullo_epi32(_mm256_and_si256(_mm256_srli_epi32(px, 16), byte), w));
}

// Writes 8 (or fewer, at the row's end) outputs of one row, interleaved RGB.
inline void store_rgb(__m256i ar, __m256i ag, __m256i ab, int count, uint8_t* dst) {
  alignas(32) int32_t r[8], g[8], b[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(r), clamp_shift(ar));
  _mm256_store_si256(reinterpret_cast<__m256i*>(g), clamp_shift(ag));
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), clamp_shift(ab));
  for (int i = 0; i < count; ++i) {
    dst[3 * i + 0] = static_cast<uint8_t>(r[i]);
    dst[3 * i + 1] = static_cast<uint8_t>(g[i]);
    dst[3 * i + 2] = static_cast<uint8_t>(b[i]);
  }
}

}  // namespace

// Two rows at a time: each tap's offsets and weights are loaded once for both, and the two rows' gathers
// are independent, which keeps more of them in flight.
void horizontal_avx2(const uint8_t* in, size_t in_pitch, int row0, int rows, const AxisCoeffs& xs, uint8_t* out,
                     size_t out_pitch) {
  const int n = xs.out_size, npad = xs.padded_out;
  const __m256i half = _mm256_set1_epi32(1 << (AxisCoeffs::kPrecisionBits - 1));
  int row = 0;
  for (; row + 2 <= rows; row += 2) {
    const uint8_t* src0 = in + static_cast<size_t>(row0 + row) * in_pitch;
    const uint8_t* src1 = src0 + in_pitch;
    uint8_t* dst0 = out + static_cast<size_t>(row) * out_pitch;
    uint8_t* dst1 = dst0 + out_pitch;
    for (int x0 = 0; x0 < n; x0 += 8) {
      __m256i r0 = half, g0 = half, b0 = half, r1 = half, g1 = half, b1 = half;
      for (int t = 0, taps = xs.group_taps[x0 / 8]; t < taps; ++t) {
        const size_t at = static_cast<size_t>(t) * npad + x0;
        const __m256i offs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&xs.offsets_by_tap[at]));
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&xs.weights_by_tap[at]));
        tap(src0, offs, w, r0, g0, b0);
        tap(src1, offs, w, r1, g1, b1);
      }
      const int count = n - x0 < 8 ? n - x0 : 8;
      store_rgb(r0, g0, b0, count, dst0 + 3 * x0);
      store_rgb(r1, g1, b1, count, dst1 + 3 * x0);
    }
  }
  for (; row < rows; ++row) {
    const uint8_t* src = in + static_cast<size_t>(row0 + row) * in_pitch;
    uint8_t* dst = out + static_cast<size_t>(row) * out_pitch;
    for (int x0 = 0; x0 < n; x0 += 8) {
      __m256i r = half, g = half, b = half;
      for (int t = 0, taps = xs.group_taps[x0 / 8]; t < taps; ++t) {
        const size_t at = static_cast<size_t>(t) * npad + x0;
        tap(src, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&xs.offsets_by_tap[at])),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&xs.weights_by_tap[at])), r, g, b);
      }
      store_rgb(r, g, b, n - x0 < 8 ? n - x0 : 8, dst + 3 * x0);
    }
  }
}

void vertical_avx2(const uint8_t* in, size_t in_pitch, int row0, const AxisCoeffs& ys, size_t row_bytes, uint8_t* out) {
  const __m256i half = _mm256_set1_epi32(1 << (AxisCoeffs::kPrecisionBits - 1));
  for (int y = 0; y < ys.out_size; ++y) {
    const int32_t* k = &ys.weights[static_cast<size_t>(y) * ys.taps];
    const uint8_t* base = in + static_cast<size_t>(ys.first[y] - row0) * in_pitch;
    uint8_t* dst = out + static_cast<size_t>(y) * row_bytes;
    size_t i = 0;
    for (; i + 16 <= row_bytes; i += 16) {
      __m256i lo = half, hi = half;
      for (int t = 0; t < ys.count[y]; ++t) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + t * in_pitch + i));
        const __m256i w = _mm256_set1_epi32(k[t]);
        lo = _mm256_add_epi32(lo, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(v), w));
        hi = _mm256_add_epi32(hi, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)), w));
      }
      // 16 int32 in [0, 255] -> 16 bytes, in order.
      const __m256i words = _mm256_packus_epi32(clamp_shift(lo), clamp_shift(hi));  // lanes interleaved
      const __m256i ordered = _mm256_permute4x64_epi64(words, 0xD8);
      const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(ordered), _mm256_extracti128_si256(ordered, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), bytes);
    }
    for (; i < row_bytes; ++i) {
      int32_t acc = 1 << (AxisCoeffs::kPrecisionBits - 1);
      for (int t = 0; t < ys.count[y]; ++t) acc += base[t * in_pitch + i] * k[t];
      dst[i] = clip8(acc);
    }
  }
}

}  // namespace chute::detail
