// Reading and writing the little-endian integers of chute's on-disk formats (packed shards and index,
// raw images) at any byte offset: memcpy, so an unaligned field is no undefined behaviour and the compiler
// emits a plain load or store. The formats are little-endian and so is every host chute builds for; the
// static_assert turns a big-endian port into a compile error rather than files in the wrong byte order.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace chute::detail {

static_assert(std::endian::native == std::endian::little, "chute's file formats are read and written as-is");

// The T stored at p (p need not be aligned).
template <typename T>
T load_le(const uint8_t* p) {
  static_assert(std::is_integral_v<T>);
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Stores v at p (p need not be aligned).
template <typename T>
void store_le(uint8_t* p, T v) {
  static_assert(std::is_integral_v<T>);
  std::memcpy(p, &v, sizeof v);
}

}  // namespace chute::detail
