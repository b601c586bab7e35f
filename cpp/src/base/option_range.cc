#include "chute/base/option_range.h"

namespace chute {
namespace {

std::string bound(int64_t lo) { return std::to_string(lo); }

std::string bound(uint64_t hi) {
  if (hi == kInt32Max) return "2**31 - 1";
  if (hi == kInt64Max) return "2**63 - 1";
  if (hi == kUInt64Max) return "2**64 - 1";
  return std::to_string(hi);
}

}  // namespace

std::string OptionRange::accepts() const {
  std::string text = "an int in [" + bound(lo) + ", " + bound(hi) + "]";
  if (!zero_means.empty()) text += " or " + std::string(zero_means);
  return text;
}

std::string OptionRange::message(std::string_view got) const {
  return std::string(name) + " must be " + accepts() + ", got " + std::string(got);
}

}  // namespace chute
