#include "chute/formats/tf_example.h"

#include <algorithm>
#include <string>

#include "formats/detail/proto_wire.h"

namespace chute {
namespace {

using detail::ProtoField;
using detail::ProtoReader;
using detail::WireType;

// Real Examples have tens of features; the cap keeps a hostile record's duplicate search bounded.
constexpr size_t kMaxFeatures = 4096;

Status malformed(const char* what, const ProtoReader& r) {
  return corrupt_data(std::string("not a tf.train.Example: ") + what + ": " + r.error());
}

// A Feature's list: its kind, count and first value. The oneof's last list wins.
Status parse_feature(std::span<const uint8_t> bytes, ExampleFeature* out) {
  ProtoReader r(bytes);
  ProtoField f;
  while (r.next(&f)) {
    if (f.type != WireType::kLength || f.number < 1 || f.number > 3) continue;  // unknown fields are skipped
    out->kind = f.number == 1 ? FeatureKind::kBytes : f.number == 2 ? FeatureKind::kFloat : FeatureKind::kInt64;
    out->count = 0;
    out->first_bytes = {};
    out->first_int = 0;
    ProtoReader list(f.bytes);
    ProtoField v;
    while (list.next(&v)) {
      if (v.number != 1) continue;
      if (out->kind == FeatureKind::kBytes && v.type == WireType::kLength) {
        if (out->count++ == 0) out->first_bytes = v.bytes;
      } else if (out->kind == FeatureKind::kInt64 && v.type == WireType::kVarint) {
        if (out->count++ == 0) out->first_int = static_cast<int64_t>(v.value);
      } else if (out->kind == FeatureKind::kInt64 && v.type == WireType::kLength) {  // packed
        for (std::span<const uint8_t> packed = v.bytes; !packed.empty();) {
          uint64_t x;
          if (!ProtoReader::take_varint(&packed, &x)) return corrupt_data("not a tf.train.Example: a bad packed int64");
          if (out->count++ == 0) out->first_int = static_cast<int64_t>(x);
        }
      } else if (out->kind == FeatureKind::kFloat && v.type == WireType::kFixed32) {
        ++out->count;
      } else if (out->kind == FeatureKind::kFloat && v.type == WireType::kLength) {  // packed
        if (v.bytes.size() % 4) return corrupt_data("not a tf.train.Example: a packed float list of odd size");
        out->count += v.bytes.size() / 4;
      } else {
        return corrupt_data("not a tf.train.Example: a " + std::string(feature_kind_name(out->kind)) +
                            " list with a value of wire type " + std::to_string(static_cast<int>(v.type)));
      }
    }
    if (list.failed()) return malformed("a feature's list", list);
  }
  if (r.failed()) return malformed("a feature", r);
  return Status::ok();
}

}  // namespace

const char* feature_kind_name(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::kBytes:
      return "bytes";
    case FeatureKind::kFloat:
      return "float";
    case FeatureKind::kInt64:
      return "int64";
    case FeatureKind::kNone:
      break;
  }
  return "empty";
}

Result<std::vector<ExampleFeature>> parse_example(std::span<const uint8_t> example) {
  std::vector<ExampleFeature> out;
  ProtoReader message(example);
  ProtoField features;
  while (message.next(&features)) {
    if (features.number != 1 || features.type != WireType::kLength) continue;
    ProtoReader map(features.bytes);
    ProtoField entry;
    while (map.next(&entry)) {
      if (entry.number != 1 || entry.type != WireType::kLength) continue;
      ExampleFeature feature;
      ProtoReader kv(entry.bytes);
      ProtoField f;
      while (kv.next(&f)) {
        if (f.type != WireType::kLength) continue;
        if (f.number == 1) {
          feature.name = {reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size()};
        } else if (f.number == 2) {
          feature.kind = FeatureKind::kNone;  // a value given twice: the last one, whole
          CHUTE_RETURN_IF_ERROR(parse_feature(f.bytes, &feature));
        }
      }
      if (kv.failed()) return malformed("a feature map entry", kv);
      if (out.size() >= kMaxFeatures)
        return corrupt_data("not an image Example: more than " + std::to_string(kMaxFeatures) + " features");
      auto same = std::find_if(out.begin(), out.end(), [&](const ExampleFeature& e) { return e.name == feature.name; });
      if (same != out.end()) out.erase(same);
      out.push_back(feature);
    }
    if (map.failed()) return malformed("the feature map", map);
  }
  if (message.failed()) return malformed("the message", message);
  return out;
}

const ExampleFeature* find_feature(const std::vector<ExampleFeature>& features, std::string_view name) {
  for (const ExampleFeature& f : features)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace chute
