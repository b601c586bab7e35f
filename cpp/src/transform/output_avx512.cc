// AVX-512 versions of the commonest output writes, NCHW uint8 and NCHW float32; compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vbmi and called only where the CPU has them (output.cc). They write
// exactly what the scalar table-driven loop writes: float values are gathered from the same table.
//
// Why: the scalar loop's cost is the de-interleaving of RGB into planes, one byte at a time. Here 16
// pixels are loaded at once and one byte permute (VBMI) splits them into their three planes, mirrored
// for a flip. Float values come from the 256-entry table by a gather (computing them took two vector
// divisions per 16 values, the kernel's largest cost), and whole aligned vectors are written with
// non-temporal stores: a float batch (38.5 MB at 256 x 3x224x224) is read by the consumer long after this
// core wrote it, so a normal store's read-for-ownership and the cache lines it evicts (the decoder's) buy
// nothing.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as in resample_avx512.cc
#endif
#include <immintrin.h>

#include <cstdint>

#include "transform/detail/output_kernels.h"

namespace chute::detail {
namespace {

inline __mmask64 first_bytes(int n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }

// Splits pixels into planes: bytes [16c, 16c + 16) of the result are channel c of 16 pixels. `order`
// maps plane bytes to bytes of the 48 loaded; see plane_order().
struct PlaneSplitter {
  __m512i straight, mirrored;
  PlaneSplitter() {
    alignas(64) uint8_t s[64] = {}, m[64] = {};
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 16; ++i) {
        s[16 * c + i] = static_cast<uint8_t>(3 * i + c);
        m[16 * c + i] = static_cast<uint8_t>(3 * (15 - i) + c);
      }
    straight = _mm512_load_si512(s);
    mirrored = _mm512_load_si512(m);
  }
  // Outputs [x0, x0 + count) of one row of `w` pixels: the inputs x0.. or, mirrored, w - 1 - x0 down.
  __m512i split(const uint8_t* row, int w, int x0, int count, bool flip) const {
    if (!flip) return _mm512_permutexvar_epi8(straight, _mm512_maskz_loadu_epi8(first_bytes(3 * count), row + 3 * x0));
    const __m512i pixels = _mm512_maskz_loadu_epi8(first_bytes(3 * count), row + 3 * (w - x0 - count));
    // With fewer than 16 pixels loaded, lane i takes pixel count - 1 - i: shift the mirrored order down.
    const __m512i order = _mm512_sub_epi8(mirrored, _mm512_set1_epi8(static_cast<char>(3 * (16 - count))));
    return _mm512_permutexvar_epi8(order, pixels);
  }
};

template <int C>
__m128i plane(__m512i planes) {
  return _mm512_extracti32x4_epi32(planes, C);
}

template <int C>
void store_float_plane(__m512i planes, const float* lut, __mmask16 mask, float* dst) {
  const __m512 v = _mm512_i32gather_ps(_mm512_cvtepu8_epi32(plane<C>(planes)), lut + 256 * C, 4);
  if (mask == 0xFFFF && (reinterpret_cast<uintptr_t>(dst) & 63) == 0)
    _mm512_stream_ps(dst, v);
  else
    _mm512_mask_storeu_ps(dst, mask, v);
}

}  // namespace

void write_planes_u8_avx512(const uint8_t* rgb, int h, int w, bool flip, uint8_t* dst) {
  static const PlaneSplitter splitter;
  const size_t plane_size = static_cast<size_t>(h) * w;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = rgb + static_cast<size_t>(y) * w * 3;
    uint8_t* out = dst + static_cast<size_t>(y) * w;
    for (int x0 = 0; x0 < w; x0 += 16) {
      const int count = w - x0 < 16 ? w - x0 : 16;
      const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
      const __m512i planes = splitter.split(row, w, x0, count, flip);
      _mm_mask_storeu_epi8(out + x0, mask, plane<0>(planes));
      _mm_mask_storeu_epi8(out + plane_size + x0, mask, plane<1>(planes));
      _mm_mask_storeu_epi8(out + 2 * plane_size + x0, mask, plane<2>(planes));
    }
  }
}

void write_planes_f32_avx512(const uint8_t* rgb, int h, int w, bool flip, const float* lut, float* dst) {
  static const PlaneSplitter splitter;
  const size_t plane_size = static_cast<size_t>(h) * w;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = rgb + static_cast<size_t>(y) * w * 3;
    float* out = dst + static_cast<size_t>(y) * w;
    for (int x0 = 0; x0 < w; x0 += 16) {
      const int count = w - x0 < 16 ? w - x0 : 16;
      const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
      const __m512i planes = splitter.split(row, w, x0, count, flip);
      store_float_plane<0>(planes, lut, mask, out + x0);
      store_float_plane<1>(planes, lut, mask, out + plane_size + x0);
      store_float_plane<2>(planes, lut, mask, out + 2 * plane_size + x0);
    }
  }
  _mm_sfence();  // the stream stores are ordered before whatever publishes the sample (a mutex release)
}

}  // namespace chute::detail
