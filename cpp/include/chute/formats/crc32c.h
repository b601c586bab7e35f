// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, as iSCSI and ext4 use it): the checksum of
// TFRecord's framing, and TFRecord's mask over it.
//
// On x86-64 with SSE4.2 the CPU's crc32 instruction computes it (about 8 bytes a cycle: a 110 KB JPEG in
// ~15 us, so every read can be checked); elsewhere a slicing-by-8 table (~1.5 GB/s). Both give the same
// value; crc32c_test.cc checks them against the RFC 3720 vectors and each other.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace chute {

// The CRC-32C of `bytes`, continuing from `crc` (the value for the bytes before; 0 to start).
uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc = 0);

// TFRecord stores every CRC masked (a CRC of data that holds CRCs is weak): rotated right by 15 bits, plus
// a constant (tensorflow/core/lib/hash/crc32c.h, Mask).
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace chute
