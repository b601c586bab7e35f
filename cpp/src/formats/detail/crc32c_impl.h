// The two implementations behind crc32c(), exposed so that the test can hold each to the same vectors.
#pragma once

#include <cstdint>
#include <span>

namespace chute::detail {

uint32_t crc32c_table(std::span<const uint8_t> bytes, uint32_t crc);
// Only where crc32c_hardware_available().
uint32_t crc32c_hardware(std::span<const uint8_t> bytes, uint32_t crc);
bool crc32c_hardware_available();

}  // namespace chute::detail
