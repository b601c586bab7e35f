// A protobuf wire-format reader (https://protobuf.dev/programming-guides/encoding/): the fields of one
// message, one at a time, with no generated code and no library. Enough for tf.train.Example and Caffe's
// Datum. Every length is checked against the bytes left before it is used; groups (wire types 3, 4,
// deprecated) and varints over 10 bytes are errors.
// Thread-safety: a reader is one thread's; the bytes it reads are not changed.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace chute::detail {

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

struct ProtoField {
  uint32_t number = 0;
  WireType type = WireType::kVarint;
  uint64_t value = 0;              // kVarint, kFixed64, kFixed32
  std::span<const uint8_t> bytes;  // kLength: the field's bytes
};

class ProtoReader {
 public:
  explicit ProtoReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  // The next field into `f`; false at the end of the message or on malformed bytes (then error() says why).
  bool next(ProtoField* f) {
    if (pos_ >= bytes_.size() || !error_.empty()) return false;
    uint64_t tag;
    if (!varint(&tag)) return fail("a field tag runs past the end");
    f->number = static_cast<uint32_t>(tag >> 3);
    if (f->number == 0 || (tag >> 3) > 0x1fffffff) return fail("field number 0 or too large");
    switch (tag & 7) {
      case 0:
        f->type = WireType::kVarint;
        return varint(&f->value) || fail("a varint runs past the end, or is longer than 10 bytes");
      case 1:
        f->type = WireType::kFixed64;
        return fixed(8, &f->value);
      case 5:
        f->type = WireType::kFixed32;
        return fixed(4, &f->value);
      case 2: {
        uint64_t n;
        if (!varint(&n)) return fail("a length runs past the end");
        if (n > bytes_.size() - pos_)
          return fail("field " + std::to_string(f->number) + " claims " + std::to_string(n) + " bytes, " +
                      std::to_string(bytes_.size() - pos_) + " are left");
        f->type = WireType::kLength;
        f->bytes = bytes_.subspan(pos_, n);
        pos_ += n;
        return true;
      }
      default:
        return fail("wire type " + std::to_string(tag & 7) + " (a group, or not a protobuf message)");
    }
  }
  // The offset of the next field in the bytes read.
  size_t position() const { return pos_; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

  // A varint from the start of `bytes` (a packed repeated field), advancing it; false when malformed.
  static bool take_varint(std::span<const uint8_t>* bytes, uint64_t* out) {
    ProtoReader r(*bytes);
    if (!r.varint(out)) return false;
    *bytes = bytes->subspan(r.pos_);
    return true;
  }

 private:
  bool varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= bytes_.size()) return false;
      const uint8_t b = bytes_[pos_++];
      v |= static_cast<uint64_t>(b & 0x7f) << shift;  // bits past 64 fall off, as protobuf's own parser does
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return false;  // an 11th byte
  }
  bool fixed(size_t n, uint64_t* out) {
    if (bytes_.size() - pos_ < n) return fail("a fixed-width field runs past the end");
    uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + pos_, n);  // little-endian hosts only
    pos_ += n;
    *out = v;
    return true;
  }
  bool fail(std::string why) {
    if (error_.empty()) error_ = "malformed protobuf at byte " + std::to_string(pos_) + ": " + std::move(why);
    return false;
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace chute::detail
