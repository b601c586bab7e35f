// Test-only: protobuf wire-format bytes written by hand (tf.train.Example, Caffe Datum), for the tests and
// the fuzz seeds of the parsers. Field numbers are the messages' own (tf_example.h, caffe_datum.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace chute::detail {

inline void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<uint8_t>(v | 0x80));
  out.push_back(static_cast<uint8_t>(v));
}
inline void put_tag(std::vector<uint8_t>& out, uint32_t number, uint8_t wire) {
  put_varint(out, uint64_t{number} << 3 | wire);
}
inline void put_bytes(std::vector<uint8_t>& out, uint32_t number, std::string_view bytes) {
  put_tag(out, number, 2);
  put_varint(out, bytes.size());
  out.insert(out.end(), bytes.begin(), bytes.end());
}
inline void put_bytes(std::vector<uint8_t>& out, uint32_t number, const std::vector<uint8_t>& bytes) {
  put_bytes(out, number, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}
inline void put_int(std::vector<uint8_t>& out, uint32_t number, int64_t v) {
  put_tag(out, number, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

// A tf.train.Example of (name, Feature bytes) entries.
struct ExampleWriter {
  std::vector<uint8_t> features;
  ExampleWriter& bytes(std::string_view name, const std::vector<uint8_t>& value) {
    std::vector<uint8_t> list, feature;
    put_bytes(list, 1, value);
    put_bytes(feature, 1, list);  // bytes_list
    return entry(name, feature);
  }
  ExampleWriter& int64(std::string_view name, int64_t value, bool packed = true) {
    std::vector<uint8_t> list, feature;
    if (packed) {
      std::vector<uint8_t> values;
      put_varint(values, static_cast<uint64_t>(value));
      put_bytes(list, 1, values);
    } else {
      put_int(list, 1, value);
    }
    put_bytes(feature, 3, list);  // int64_list
    return entry(name, feature);
  }
  ExampleWriter& entry(std::string_view name, const std::vector<uint8_t>& feature) {
    std::vector<uint8_t> kv;
    put_bytes(kv, 1, name);
    put_bytes(kv, 2, feature);
    put_bytes(features, 1, kv);
    return *this;
  }
  std::vector<uint8_t> done() const {
    std::vector<uint8_t> example;
    put_bytes(example, 1, features);
    return example;
  }
};

}  // namespace chute::detail
