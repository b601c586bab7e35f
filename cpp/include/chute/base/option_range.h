// OptionRange: the accepted values of one integer option, stated once. An options struct's validate()
// checks its fields against these; the Python binding converts arguments against the same ranges, so a
// Python int too large for the C++ field gets the same message as one that fits but is out of range.
// Thread-safety: constant values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "chute/base/status.h"

namespace chute {

inline constexpr uint64_t kInt32Max = 0x7fffffffu;
inline constexpr uint64_t kInt64Max = 0x7fffffffffffffffu;
inline constexpr uint64_t kUInt64Max = ~uint64_t{0};

struct OptionRange {
  std::string_view name;
  int64_t lo = 0;
  uint64_t hi = kInt64Max;
  // The spelling (in Python) of the choice that 0 stands for in C++: "'auto'" or "None"; empty when 0 is
  // only a number like the others.
  std::string_view zero_means = {};

  // "an int in [1, 2**31 - 1] or 'auto'" (the bounds of the C++ types by their Python names).
  std::string accepts() const;
  bool contains(int64_t v) const { return v >= lo && (v < 0 || static_cast<uint64_t>(v) <= hi); }
  bool contains(uint64_t v) const { return (lo <= 0 || v >= static_cast<uint64_t>(lo)) && v <= hi; }
  // "num_threads must be an int in [1, 2**31 - 1] or 'auto', got -1" for `got` (the value as text).
  std::string message(std::string_view got) const;
  // Ok when `v` is in range, or 0 standing for zero_means; else kInvalidArgument with message().
  template <typename T>
  Status check(T v) const {
    bool in;
    if constexpr (std::is_signed_v<T>)
      in = contains(static_cast<int64_t>(v));
    else
      in = contains(static_cast<uint64_t>(v));
    if ((v == 0 && !zero_means.empty()) || in) return Status::ok();
    return invalid_argument(message(std::to_string(v)));
  }
};

}  // namespace chute
