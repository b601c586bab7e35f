// tf.train.Example, parsed in place from a record's bytes, with no TensorFlow and no protobuf library
// (tensorflow/core/example/example.proto and feature.proto):
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }      a map entry: { string key = 1; Feature value = 2; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1; }  (packed or not)
//   Int64List { repeated int64 value = 1; }
// As protobuf parses them: a key that appears twice takes its last value, and so does a oneof set twice.
// Thread-safety: pure functions over bytes the caller keeps.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "chute/base/status.h"

namespace chute {

enum class FeatureKind { kNone, kBytes, kFloat, kInt64 };
// "bytes", "float", "int64", "empty".
const char* feature_kind_name(FeatureKind kind);

struct ExampleFeature {
  std::string_view name;  // inside the record's bytes
  FeatureKind kind = FeatureKind::kNone;
  size_t count = 0;                      // values in its list
  std::span<const uint8_t> first_bytes;  // kBytes: the first value, inside the record's bytes
  int64_t first_int = 0;                 // kInt64: the first value
};

// The features of a serialised Example, in the order of their last appearance. kCorruptData (naming the
// byte) for bytes that are not one.
Result<std::vector<ExampleFeature>> parse_example(std::span<const uint8_t> example);

// The feature named `name`, or nullptr.
const ExampleFeature* find_feature(const std::vector<ExampleFeature>& features, std::string_view name);

}  // namespace chute
