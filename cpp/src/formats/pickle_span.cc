#include "chute/formats/pickle_span.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

namespace chute {
namespace {

using Type = PickleValue::Type;

// Deeper nesting is refused: plain records nest two or three levels, and a tree a million levels deep (a
// few bytes a level) would overflow the stack when it is destroyed.
constexpr uint32_t kMaxDepth = 64;

PickleValue make(Type type, int64_t integer = 0, std::vector<PickleValue> items = {}) {
  PickleValue v;
  v.type = type;
  v.integer = integer;
  v.items = std::move(items);
  if (type == Type::kTuple || type == Type::kList || type == Type::kDict) {
    v.depth = 1;
    for (const PickleValue& item : v.items) v.depth = std::max(v.depth, item.depth + 1);
  }
  return v;
}

class Machine {
 public:
  // Without `memo`, memoizing stores nothing and a memo reference fails with kNeedsMemo: plain records
  // never refer back, and a list of a million keys then needs no copy of each.
  Machine(std::span<const uint8_t> p, bool memo) : p_(p), budget_(2 * p.size() + 64), use_memo_(memo) {}
  static constexpr const char* kNeedsMemo = "memo reference";

  Result<PickleValue> run() {
    while (pos_ < p_.size()) {
      const size_t at = pos_;
      const uint8_t op = p_[pos_++];
      Status st = step(op);
      if (st.code() == StatusCode::kCancelled) return st;  // kNeedsMemo: run again with the memo
      if (!st.is_ok())
        return Status(st.code(), st.message() + " (opcode 0x" + hex(op) + " at byte " + std::to_string(at) + ")");
      if (done_) {
        if (stack_.size() != 1 || !marks_.empty()) return corrupt_data("not a pickle: STOP with a malformed stack");
        return std::move(stack_.back());
      }
    }
    return corrupt_data("not a pickle, or a truncated one: no STOP opcode in " + std::to_string(p_.size()) + " bytes");
  }

 private:
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  bool take(size_t n, std::span<const uint8_t>* out) {
    if (p_.size() - pos_ < n) return false;
    *out = p_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool take_int(T* out) {
    std::span<const uint8_t> b;
    if (!take(sizeof(T), &b)) return false;
    std::memcpy(out, b.data(), sizeof(T));  // little-endian hosts only
    return true;
  }
  Status truncated() { return corrupt_data("a truncated pickle"); }
  // The values in `v`'s tree, counted up to `limit` (past it, limit + 1: a copy that large is refused).
  static size_t weight(const PickleValue& v, size_t limit) {
    size_t n = 1;
    for (const PickleValue& item : v.items) {
      if (n > limit) break;
      n += weight(item, limit - n);
    }
    return n;
  }
  // Charges a new value's tree (containers built here hold values already charged: only the new one).
  Status charge(size_t cost) {
    if (cost > budget_) return unsupported("a pickle that copies containers through its memo (a shared reference)");
    budget_ -= cost;
    return Status::ok();
  }
  Status push(PickleValue v) {
    if (v.depth > kMaxDepth) return unsupported("values nested more than " + std::to_string(kMaxDepth) + " deep");
    CHUTE_RETURN_IF_ERROR(charge(1));
    stack_.push_back(std::move(v));
    return Status::ok();
  }
  Status push_span(Type type, size_t n) {
    PickleValue v = make(type);
    if (!take(n, &v.bytes)) return truncated();
    return push(std::move(v));
  }
  template <typename Len>
  Status push_sized(Type type) {
    Len n;
    if (!take_int(&n)) return truncated();
    if constexpr (std::is_signed_v<Len>)
      if (n < 0) return corrupt_data("a negative length");
    return push_span(type, static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(n), SIZE_MAX)));
  }
  Status push_int(int64_t v) { return push(make(Type::kInt, v)); }
  // The values above the last mark, removed from the stack.
  Result<std::vector<PickleValue>> pop_mark() {
    if (marks_.empty()) return corrupt_data("no MARK for a MARK-using opcode");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue> items(std::make_move_iterator(stack_.begin() + static_cast<ptrdiff_t>(mark)),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }
  Status need(size_t n) {
    return stack_.size() >= n + (marks_.empty() ? 0 : marks_.back()) ? Status::ok() : corrupt_data("stack underflow");
  }
  Status tuple(size_t n) {
    CHUTE_RETURN_IF_ERROR(need(n));
    std::vector<PickleValue> items(std::make_move_iterator(stack_.end() - static_cast<ptrdiff_t>(n)),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(stack_.size() - n);
    return push(make(Type::kTuple, 0, std::move(items)));
  }
  Status extend(std::vector<PickleValue> items, bool pairs) {
    if (stack_.empty() || (marks_.size() && stack_.size() <= marks_.back())) return corrupt_data("stack underflow");
    PickleValue& target = stack_.back();
    if (target.type != (pairs ? Type::kDict : Type::kList))
      return unsupported(std::string(pairs ? "SETITEM(S)" : "APPEND(S)") + " on a " + pickle_type_name(target.type));
    if (pairs && items.size() % 2) return corrupt_data("SETITEMS with an odd number of values");
    for (PickleValue& v : items) {
      target.depth = std::max(target.depth, v.depth + 1);
      target.items.push_back(std::move(v));
    }
    if (target.depth > kMaxDepth) return unsupported("values nested more than " + std::to_string(kMaxDepth) + " deep");
    return Status::ok();
  }
  Status memo_put(uint64_t key) {
    if (stack_.empty()) return corrupt_data("memoizing an empty stack");
    if (!use_memo_) return Status::ok();
    CHUTE_RETURN_IF_ERROR(charge(weight(stack_.back(), budget_)));  // a copy of the whole tree
    memo_[key] = stack_.back();
    return Status::ok();
  }
  Status memo_get(uint64_t key) {
    if (!use_memo_) return Status(StatusCode::kCancelled, kNeedsMemo);
    auto it = memo_.find(key);
    if (it == memo_.end()) return corrupt_data("a memo reference to nothing");
    CHUTE_RETURN_IF_ERROR(charge(weight(it->second, budget_)));
    stack_.push_back(it->second);
    return Status::ok();
  }

  Status step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t v;
        if (!take_int(&v)) return truncated();
        if (v < 2 || v > 5) return unsupported("pickle protocol " + std::to_string(v) + " (2 to 5 are read)");
        return Status::ok();
      }
      case 0x95: {  // FRAME: a length hint; the opcodes inside read as any others
        uint64_t n;
        return take_int(&n) ? Status::ok() : truncated();
      }
      case '.':
        done_ = true;
        return Status::ok();
      case '(':
        marks_.push_back(stack_.size());
        return Status::ok();
      case '0':
        CHUTE_RETURN_IF_ERROR(need(1));
        stack_.pop_back();
        return Status::ok();
      case '1':
        return pop_mark().status();
      case 0x94:  // MEMOIZE
        return memo_put(memo_.size());
      case 'q': {  // BINPUT
        uint8_t k;
        return take_int(&k) ? memo_put(k) : truncated();
      }
      case 'r': {  // LONG_BINPUT
        uint32_t k;
        return take_int(&k) ? memo_put(k) : truncated();
      }
      case 'h': {  // BINGET
        uint8_t k;
        return take_int(&k) ? memo_get(k) : truncated();
      }
      case 'j': {  // LONG_BINGET
        uint32_t k;
        return take_int(&k) ? memo_get(k) : truncated();
      }
      case 'N':
        return push(make(Type::kNone));
      case 0x88:
      case 0x89:
        return push(make(Type::kBool, op == 0x88));
      case 'K': {
        uint8_t v;
        return take_int(&v) ? push_int(v) : truncated();
      }
      case 'M': {
        uint16_t v;
        return take_int(&v) ? push_int(v) : truncated();
      }
      case 'J': {
        int32_t v;
        return take_int(&v) ? push_int(v) : truncated();
      }
      case 0x8a: {  // LONG1: n bytes, little-endian two's complement
        uint8_t n;
        std::span<const uint8_t> b;
        if (!take_int(&n) || !take(n, &b)) return truncated();
        if (n > 8) return unsupported("an integer wider than 64 bits");
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= uint64_t{b[i]} << (8 * i);
        if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        return push_int(static_cast<int64_t>(v));
      }
      case 'G': {  // BINFLOAT
        std::span<const uint8_t> b;
        return take(8, &b) ? push(make(Type::kFloat)) : truncated();
      }
      case 'C':
        return push_sized<uint8_t>(Type::kBytes);
      case 'B':
        return push_sized<uint32_t>(Type::kBytes);
      case 0x8e:  // BINBYTES8
      case 0x96:  // BYTEARRAY8
        return push_sized<uint64_t>(Type::kBytes);
      case 'U':  // SHORT_BINSTRING (Python 2 str)
        return push_sized<uint8_t>(Type::kBytes);
      case 'T':  // BINSTRING
        return push_sized<int32_t>(Type::kBytes);
      case 0x8c:
        return push_sized<uint8_t>(Type::kString);
      case 'X':
        return push_sized<uint32_t>(Type::kString);
      case 0x8d:
        return push_sized<uint64_t>(Type::kString);
      case ')':
        return push(make(Type::kTuple));
      case 0x85:
      case 0x86:
      case 0x87:
        return tuple(op - 0x84);
      case 't': {
        CHUTE_ASSIGN_OR_RETURN(auto items, pop_mark());
        return push(make(Type::kTuple, 0, std::move(items)));
      }
      case ']':
        return push(make(Type::kList));
      case 'l': {
        CHUTE_ASSIGN_OR_RETURN(auto items, pop_mark());
        return push(make(Type::kList, 0, std::move(items)));
      }
      case '}':
        return push(make(Type::kDict));
      case 'd': {
        CHUTE_ASSIGN_OR_RETURN(auto items, pop_mark());
        if (items.size() % 2) return corrupt_data("DICT with an odd number of values");
        return push(make(Type::kDict, 0, std::move(items)));
      }
      case 'a': {
        CHUTE_RETURN_IF_ERROR(need(2));
        std::vector<PickleValue> one;
        one.push_back(std::move(stack_.back()));
        stack_.pop_back();
        return extend(std::move(one), false);
      }
      case 's': {
        CHUTE_RETURN_IF_ERROR(need(3));
        std::vector<PickleValue> two(std::make_move_iterator(stack_.end() - 2), std::make_move_iterator(stack_.end()));
        stack_.resize(stack_.size() - 2);
        return extend(std::move(two), true);
      }
      case 'e':
      case 'u': {
        CHUTE_ASSIGN_OR_RETURN(auto items, pop_mark());
        return extend(std::move(items), op == 'u');
      }
      case 'c':
      case 0x93: {
        const bool codecs =
            op == 'c' && p_.size() - pos_ >= 15 && std::memcmp(p_.data() + pos_, "_codecs\nencode\n", 15) == 0;
        if (codecs)
          return unsupported(
              "bytes pickled with protocol 2 by Python 3 (as _codecs.encode of a str), which are not stored as "
              "contiguous bytes; write the records with pickle protocol 3 or later");
        return unsupported(
            "a pickle that imports a class or function (GLOBAL): not plain data (bytes, ints, "
            "tuples, lists, dicts); chute never runs a pickle");
      }
      default:
        return unsupported("a pickle opcode outside plain data (bytes, ints, tuples, lists, dicts)");
    }
  }

  std::span<const uint8_t> p_;
  size_t pos_ = 0;
  size_t budget_;  // values that may still be made or copied: bounds memo copies of a hostile pickle
  bool use_memo_;
  bool done_ = false;
  std::vector<PickleValue> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleValue> memo_;
};

}  // namespace

const PickleValue* PickleValue::find(std::string_view key) const {
  if (type != Type::kDict) return nullptr;
  for (size_t i = items.size() / 2; i-- > 0;)  // the last assignment wins, as in Python
    if ((items[2 * i].type == Type::kString || items[2 * i].type == Type::kBytes) && items[2 * i].text() == key)
      return &items[2 * i + 1];
  return nullptr;
}

const char* pickle_type_name(PickleValue::Type type) {
  switch (type) {
    case Type::kNone:
      return "None";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kBytes:
      return "bytes";
    case Type::kString:
      return "str";
    case Type::kTuple:
      return "tuple";
    case Type::kList:
      return "list";
    case Type::kDict:
      return "dict";
  }
  return "?";
}

Result<PickleValue> parse_pickle(std::span<const uint8_t> pickle) {
  Result<PickleValue> out = Machine(pickle, false).run();
  if (!out.is_ok() && out.status().code() == StatusCode::kCancelled) return Machine(pickle, true).run();
  return out;
}

}  // namespace chute
