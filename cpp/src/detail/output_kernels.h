// AVX-512 versions of OutputWriter::write for NCHW uint8 and float32. Internal to output.cc and
// output_avx512.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chute::detail {

// `rgb`: h x w interleaved RGB pixels; `dst`: three h x w planes. With `flip`, each row is mirrored.
void write_planes_u8_avx512(const uint8_t* rgb, int h, int w, bool flip, uint8_t* dst);
// The same as float32 (v / 255 - mean[c]) / std[c].
void write_planes_f32_avx512(const uint8_t* rgb, int h, int w, bool flip, const float* mean, const float* std,
                             float* dst);

}  // namespace chute::detail
