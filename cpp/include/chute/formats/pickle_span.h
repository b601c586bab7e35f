// Pickled values read without unpickling: the opcodes of pickle protocols 2 to 5 that plain data uses
// (ints, bytes, strings, None, bools, floats, tuples, lists, dicts, the memo and frames), run on a small
// stack machine that keeps every bytes and str value as a span of the pickle. So a record pickled as
// `(image_bytes, label)` or `{"image": image_bytes, "label": label}` gives the image's position inside the
// record, and the native reader copies it from there: no Python, no object built, no code run (a pickle
// that imports or calls anything - GLOBAL, REDUCE, ... - is refused, never executed).
// Python 3 bytes pickled with protocol 2 are `_codecs.encode(str, 'latin1')` calls, not contiguous bytes:
// refused with that explanation. Python 2 `str` (BINSTRING) reads as bytes.
// Thread-safety: pure functions over bytes the caller keeps.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "chute/base/status.h"

namespace chute {

struct PickleValue {
  enum class Type { kNone, kBool, kInt, kFloat, kBytes, kString, kTuple, kList, kDict };
  Type type = Type::kNone;
  int64_t integer = 0;             // kInt, kBool
  std::span<const uint8_t> bytes;  // kBytes, kString (UTF-8): inside the pickle
  std::vector<PickleValue> items;  // kTuple, kList; kDict: key, value, key, value, ... in insertion order
  uint32_t depth = 0;              // containers nested in this value, itself included (at most 64)

  // kDict: the value of the str (or bytes) key `key`, or nullptr.
  const PickleValue* find(std::string_view key) const;
  std::string_view text() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
};
// "None", "bool", "int", "float", "bytes", "str", "tuple", "list", "dict".
const char* pickle_type_name(PickleValue::Type type);

// The value a pickle holds. kUnsupported for a valid pickle outside this subset (naming the opcode),
// kCorruptData for bytes that are not a pickle (naming the byte offset).
Result<PickleValue> parse_pickle(std::span<const uint8_t> pickle);

}  // namespace chute
