// AVX-512 version of the horizontal resampling pass; compiled with -mavx512f -mavx512bw -mavx512vbmi and
// called only where the CPU has them. It computes exactly the integers of the portable pass.
//
// Why it exists: the AVX2 pass fetches each tap's 8 pixels with a gather, which dominates its time. Here the
// input pixels of 16 adjacent outputs (at most 42 pixels, 128 bytes, for shrinks up to ~2.5x) are loaded
// once into two registers, and each tap's R, G and B bytes are picked out of them with one two-register
// byte permute (VBMI's vpermt2b) per channel, straight into the low byte of 32-bit lanes.
// GCC 12's AVX-512 intrinsics headers trip -Wmaybe-uninitialized on their own placeholder operands
// (GCC bug 105593), once per masked intrinsic.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "transform/detail/resample_kernels.h"

namespace chute::detail {
namespace {

constexpr __mmask64 kLowByteOfEachDword = 0x1111111111111111ULL;

// Bytes [0, n) of a 64-byte block as a load mask (n may be <= 0 or >= 64).
inline __mmask64 first_bytes(int n) { return n <= 0 ? 0 : n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }

// One row's inputs for a group: 128 bytes from `src`, those past `bytes` zero (and never read).
struct Window128 {
  __m512i lo, hi;
  Window128(const uint8_t* src, int bytes)
      : lo(_mm512_maskz_loadu_epi8(first_bytes(bytes), src)),
        hi(_mm512_maskz_loadu_epi8(first_bytes(bytes - 64), src + 64)) {}
  // Byte idx (per dword lane, < 128) of the window, zero-extended to 32 bits.
  __m512i pick(__m512i idx) const { return _mm512_maskz_permutex2var_epi8(kLowByteOfEachDword, lo, idx, hi); }
};

struct Acc {
  __m512i r, g, b;
  explicit Acc(__m512i half) : r(half), g(half), b(half) {}
  void tap(const Window128& in, __m512i idx, __m512i w) {
    const __m512i one = _mm512_set1_epi32(1);
    r = _mm512_add_epi32(r, _mm512_mullo_epi32(in.pick(idx), w));
    idx = _mm512_add_epi32(idx, one);
    g = _mm512_add_epi32(g, _mm512_mullo_epi32(in.pick(idx), w));
    idx = _mm512_add_epi32(idx, one);
    b = _mm512_add_epi32(b, _mm512_mullo_epi32(in.pick(idx), w));
  }
  // Shifts, clamps to [0, 255] and writes `count` (<= 16) interleaved RGB pixels.
  void store(__m512i interleave, int count, uint8_t* dst) const {
    const __m512i zero = _mm512_setzero_si512();
    const auto bytes = [&](__m512i acc) {  // 16 x int32 -> 16 x uint8, saturating above 255
      return _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_srai_epi32(acc, AxisCoeffs::kPrecisionBits), zero));
    };
    __m512i planes = _mm512_castsi128_si512(bytes(r));
    planes = _mm512_inserti32x4(planes, bytes(g), 1);
    planes = _mm512_inserti32x4(planes, bytes(b), 2);
    _mm512_mask_storeu_epi8(dst, first_bytes(3 * count), _mm512_permutexvar_epi8(interleave, planes));
  }
};

}  // namespace

// Two rows at a time: each tap's indices and weights serve both.
void horizontal_avx512(const uint8_t* in, size_t in_pitch, int row0, int rows, const AxisCoeffs& xs, uint8_t* out,
                       size_t out_pitch) {
  const int n = xs.out_size, npad = xs.padded_out;
  const __m512i half = _mm512_set1_epi32(1 << (AxisCoeffs::kPrecisionBits - 1));
  const __m512i three = _mm512_set1_epi32(3);
  // From planes [R0..R15 | G0..G15 | B0..B15] to R0 G0 B0 R1 G1 B1 ...
  alignas(64) uint8_t order[64] = {};
  for (int i = 0; i < 16; ++i) {
    order[3 * i] = static_cast<uint8_t>(i);
    order[3 * i + 1] = static_cast<uint8_t>(16 + i);
    order[3 * i + 2] = static_cast<uint8_t>(32 + i);
  }
  const __m512i interleave = _mm512_load_si512(order);
  for (int row = 0; row < rows; row += 2) {
    const bool pair = row + 1 < rows;
    const uint8_t* src0 = in + static_cast<size_t>(row0 + row) * in_pitch;
    const uint8_t* src1 = pair ? src0 + in_pitch : src0;
    uint8_t* dst0 = out + static_cast<size_t>(row) * out_pitch;
    uint8_t* dst1 = dst0 + out_pitch;
    for (int g = 0, x0 = 0; x0 < n; ++g, x0 += 16) {
      const int begin = xs.group16_begin[g], bytes = xs.group16_bytes[g];
      const Window128 in0(src0 + begin, bytes), in1(src1 + begin, bytes);
      __m512i idx = _mm512_loadu_si512(&xs.offsets16[x0]);
      Acc a0(half), a1(half);
      for (int t = 0, taps = xs.group16_taps[g]; t < taps; ++t) {
        const __m512i w = _mm512_loadu_si512(&xs.weights_by_tap[static_cast<size_t>(t) * npad + x0]);
        a0.tap(in0, idx, w);
        if (pair) a1.tap(in1, idx, w);
        idx = _mm512_add_epi32(idx, three);
      }
      const int count = n - x0 < 16 ? n - x0 : 16;
      a0.store(interleave, count, dst0 + 3 * x0);
      if (pair) a1.store(interleave, count, dst1 + 3 * x0);
    }
  }
}

// 16 bytes of a row at a time, one 32-bit accumulator per byte in a single register (the AVX2 pass needs
// two), the row's tail masked instead of a scalar loop. Same integer arithmetic as vertical_portable.
void vertical_avx512(const uint8_t* in, size_t in_pitch, int row0, const AxisCoeffs& ys, size_t row_bytes,
                     uint8_t* out) {
  const __m512i half = _mm512_set1_epi32(1 << (AxisCoeffs::kPrecisionBits - 1));
  const __m512i zero = _mm512_setzero_si512();
  for (int y = 0; y < ys.out_size; ++y) {
    const int32_t* k = &ys.weights[static_cast<size_t>(y) * ys.taps];
    const uint8_t* base = in + static_cast<size_t>(ys.first[y] - row0) * in_pitch;
    uint8_t* dst = out + static_cast<size_t>(y) * row_bytes;
    for (size_t i = 0; i < row_bytes; i += 16) {
      const size_t left = row_bytes - i;
      const __mmask16 mask = left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
      __m512i acc = half;
      for (int t = 0; t < ys.count[y]; ++t) {
        const __m128i v = _mm_maskz_loadu_epi8(mask, base + t * in_pitch + i);
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(v), _mm512_set1_epi32(k[t])));
      }
      const __m128i bytes =
          _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_srai_epi32(acc, AxisCoeffs::kPrecisionBits), zero));
      _mm_mask_storeu_epi8(dst + i, mask, bytes);
    }
  }
}

}  // namespace chute::detail
