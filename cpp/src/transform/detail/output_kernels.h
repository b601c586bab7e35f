// AVX-512 versions of OutputWriter::write for NCHW uint8 and float32. Internal to output.cc and
// output_avx512.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chute::detail {

// `rgb`: h x w interleaved RGB pixels; `dst`: three h x w planes. With `flip`, each row is mirrored.
void write_planes_u8_avx512(const uint8_t* rgb, int h, int w, bool flip, uint8_t* dst);
// The same as float32 values from `lut`: 3 x 256 floats, plane c's value for byte v at lut[256 * c + v].
void write_planes_f32_avx512(const uint8_t* rgb, int h, int w, bool flip, const float* lut, float* dst);

}  // namespace chute::detail
