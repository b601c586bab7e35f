#include "chute/formats/lmdb_source.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "chute/formats/caffe_datum.h"
#include "chute/formats/lmdb_file.h"
#include "chute/formats/pickle_span.h"

namespace chute {
namespace {

constexpr size_t kLayoutProbe = 8;            // records whose layout must agree
constexpr uint64_t kShardBytes = 256u << 20;  // about this much image data per shard
constexpr double kInOrder = 0.9;              // the share of samples at most kNear before their predecessor, for shards
constexpr uint64_t kNear = 1u << 20;          // small values share leaf pages, placed from the page's end backwards
constexpr size_t kHeader = 16;                // the fingerprint hashes an overflow page's header before a value

std::string_view as_text(std::span<const uint8_t> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

bool is_image(std::span<const uint8_t> v) {
  auto starts = [&](std::string_view magic, size_t at = 0) {
    return v.size() >= at + magic.size() && as_text(v.subspan(at, magic.size())) == magic;
  };
  return starts("\xff\xd8\xff") || starts("\x89PNG\r\n\x1a\n") || (starts("RIFF") && starts("WEBP", 8));
}

std::string hex_byte(uint8_t c) {
  const char* hex = "0123456789abcdef";
  return {hex[c >> 4], hex[c & 15]};
}

// A printable form of a key for messages: its bytes, with non-printable ones as \xNN.
std::string printable(std::span<const uint8_t> key) {
  std::string out;
  for (uint8_t c : key.first(std::min<size_t>(key.size(), 200)))
    out += c >= 0x20 && c < 0x7f && c != '\\' ? std::string(1, static_cast<char>(c)) : "\\x" + hex_byte(c);
  return key.size() > 200 ? out + "..." : out;
}

std::string describe(const PickleValue& v) {
  std::string out = pickle_type_name(v.type);
  if (v.type == PickleValue::Type::kTuple || v.type == PickleValue::Type::kList) {
    out += " (";
    for (size_t i = 0; i < v.items.size() && i < 4; ++i) out += (i ? ", " : "") + describe(v.items[i]);
    out += v.items.size() > 4 ? ", ...)" : ")";
  } else if (v.type == PickleValue::Type::kDict) {
    out += " with keys (";
    for (size_t i = 0; i < v.items.size() && i < 8; i += 2)
      out += std::string(i ? ", " : "") + "'" + std::string(v.items[i].text()) + "'";
    out += ")";
  }
  return out;
}

struct Found {
  std::span<const uint8_t> image;
  int64_t label = -1;
};

// The image and label inside a value of `layout`, or why the value does not hold it.
Result<Found> find_image(std::span<const uint8_t> value, LmdbLayout layout, const LmdbOptions& options) {
  using Type = PickleValue::Type;
  auto label_of = [](const PickleValue* v) -> Result<int64_t> {
    if (v == nullptr || v->type == Type::kNone) return int64_t{-1};
    if (v->type != Type::kInt)
      return unsupported(std::string("a label that is a ") + pickle_type_name(v->type) + ", not an int");
    return v->integer;
  };
  switch (layout) {
    case LmdbLayout::kRaw:
      if (!is_image(value)) return corrupt_data("the value is not an image file's bytes (no JPEG, PNG or WebP magic)");
      return Found{value, -1};
    case LmdbLayout::kDatum: {
      CHUTE_ASSIGN_OR_RETURN(const CaffeDatum d, parse_datum(value));
      if (!d.has_data || !d.encoded)
        return unsupported(!d.has_data ? "a Caffe Datum without data"
                                       : "a Caffe Datum of raw pixels (encoded=false); chute reads the encoded images "
                                         "of `convert_imageset --encoded`");
      return Found{d.data, d.has_label ? d.label : -1};
    }
    case LmdbLayout::kPickleTuple:
    case LmdbLayout::kPickleDict: {
      CHUTE_ASSIGN_OR_RETURN(const PickleValue v, parse_pickle(value));
      const PickleValue* image = nullptr;
      const PickleValue* label = nullptr;
      if (layout == LmdbLayout::kPickleTuple && (v.type == Type::kTuple || v.type == Type::kList) &&
          v.items.size() >= 2) {
        image = &v.items[0];
        label = &v.items[1];
      } else if (layout == LmdbLayout::kPickleDict && v.type == Type::kDict) {
        image = v.find(options.image_key);
        label = v.find(options.label_key);
      }
      if (image == nullptr || image->type != Type::kBytes)
        return unsupported("a pickled " + describe(v) + ", not " +
                           (layout == LmdbLayout::kPickleTuple
                                ? std::string("(image bytes, label)")
                                : "{'" + options.image_key + "': image bytes, '" + options.label_key + "': label}"));
      CHUTE_ASSIGN_OR_RETURN(const int64_t l, label_of(label));
      return Found{image->bytes, l};
    }
  }
  return corrupt_data("unknown layout");
}

// The layout of one value, or why it is none.
Result<LmdbLayout> layout_of(std::span<const uint8_t> value, const LmdbOptions& options) {
  if (!value.empty() && value[0] == 0x80) {  // pickle protocol 2+
    for (LmdbLayout l : {LmdbLayout::kPickleTuple, LmdbLayout::kPickleDict})
      if (find_image(value, l, options).is_ok()) return l;
    Status st = find_image(value, LmdbLayout::kPickleTuple, options).status();
    if (auto v = parse_pickle(value); v.is_ok() && v->type == PickleValue::Type::kDict)
      st = find_image(value, LmdbLayout::kPickleDict, options).status();
    return st;
  }
  if (is_image(value)) return LmdbLayout::kRaw;
  if (auto d = parse_datum(value); d.is_ok() && d->has_data) {
    if (!d->encoded) return find_image(value, LmdbLayout::kDatum, options).status();
    return LmdbLayout::kDatum;
  }
  std::string head;
  for (uint8_t c : value.first(std::min<size_t>(value.size(), 8))) head += hex_byte(c);
  return unsupported("a value of " + std::to_string(value.size()) + " bytes (starting 0x" + head +
                     ") that is none of the layouts chute reads: a pickled (image bytes, label) tuple or {'" +
                     options.image_key + "': image bytes, '" + options.label_key +
                     "': label} dict, a Caffe Datum (convert_imageset --encoded), or an image file's bytes");
}

struct Scan {
  std::vector<IndexEntry> entries;
  std::string keys;
  std::vector<std::pair<uint64_t, std::string>> bad;
  LmdbInfo info;
};

Result<Scan> scan(const MappedFile& file, const LmdbOptions& options) {
  const auto bytes = file.bytes();
  CHUTE_ASSIGN_OR_RETURN(const LmdbFile db, read_lmdb(bytes, file.path()));
  Scan out;
  std::unordered_map<std::string_view, size_t> by_key;
  for (size_t i = 0; i < db.records.size(); ++i) by_key.emplace(as_text(db.records[i].key), i);
  auto value_of = [&](const LmdbRecord& r) { return bytes.subspan(r.value_offset, r.value_size); };
  // The order: `__keys__`, else LMDB's, without the two metadata records.
  std::vector<std::string> order_keys;  // from __keys__ (a key listed there may be missing: a bad sample)
  std::vector<std::optional<size_t>> order;
  if (auto it = by_key.find("__keys__"); it != by_key.end()) {
    auto keys = parse_pickle(value_of(db.records[it->second]));
    if (!keys.is_ok() || (keys->type != PickleValue::Type::kList && keys->type != PickleValue::Type::kTuple))
      return unsupported(file.path() + ": the __keys__ record is not a pickled list of keys" +
                         (keys.is_ok() ? " (it is a " + describe(*keys) + ")" : ": " + keys.status().message()));
    for (const PickleValue& k : keys->items) {
      if (k.type != PickleValue::Type::kBytes && k.type != PickleValue::Type::kString)
        return unsupported(file.path() + ": __keys__ lists a " + std::string(pickle_type_name(k.type)) +
                           ", not a key (bytes or str)");
      auto found = by_key.find(k.text());
      order.push_back(found == by_key.end() ? std::nullopt : std::optional<size_t>(found->second));
      order_keys.emplace_back(k.text());
    }
    out.info.keys_record = true;
  } else {
    for (size_t i = 0; i < db.records.size(); ++i) {
      const std::string_view k = as_text(db.records[i].key);
      if (k == "__len__") continue;
      order.push_back(i);
      order_keys.emplace_back(k);
    }
  }
  // The layout, from the first records.
  std::optional<LmdbLayout> layout;
  for (size_t s = 0, probed = 0; s < order.size() && probed < kLayoutProbe; ++s) {
    if (!order[s]) continue;
    ++probed;
    const LmdbRecord& r = db.records[*order[s]];
    auto l = layout_of(value_of(r), options);
    const std::string at = file.path() + ": record " + printable(r.key) + ": ";
    if (!l.is_ok()) return Status(l.status().code(), at + l.status().message());
    if (layout && *l != *layout)
      return unsupported(at + "a " + lmdb_layout_name(*l) + ", while the records before it are " +
                         lmdb_layout_name(*layout) + "s: one layout per database");
    layout = *l;
  }
  if (!layout) return invalid_argument(file.path() + ": no record to read in the LMDB database");
  out.info.layout = *layout;
  for (size_t s = 0; s < order.size(); ++s) {
    IndexEntry e{.offset = 0,
                 .payload_len = 0,
                 .label = -1,
                 .key_offset = out.keys.size(),
                 .shard = 0,
                 .key_len = static_cast<uint32_t>(order_keys[s].size())};
    out.keys += order_keys[s];
    if (!order[s]) {
      out.bad.emplace_back(s, "the key is listed in __keys__ but is not in the database");
    } else {
      const LmdbRecord& r = db.records[*order[s]];
      const auto value = value_of(r);
      auto found = find_image(value, *layout, options);
      if (found.is_ok()) {
        e.offset = r.value_offset + static_cast<uint64_t>(found->image.data() - value.data());
        e.payload_len = e.source_bytes = found->image.size();
        e.label = found->label;
      } else {
        out.bad.emplace_back(s, "a " + std::string(lmdb_layout_name(*layout)) + " database, but this value is " +
                                    found.status().message());
      }
    }
    out.entries.push_back(e);
  }
  return out;
}

std::string scan_note(const LmdbOptions& o) { return "lmdb image_key=" + o.image_key + " label_key=" + o.label_key; }

// Shards of about kShardBytes of consecutive samples, when the samples lie in about their order in the file
// (overflow values in write order; small values a page's worth apart at most).
std::vector<int64_t> shards_of(const IndexView& index, bool* none) {
  uint64_t in_order = 0, prev = 0;
  for (uint64_t i = 0; i < index.size(); ++i) {
    const uint64_t at = index.entry(i).offset;
    in_order += at + kNear >= prev;
    prev = at;
  }
  *none = index.size() > 1 && static_cast<double>(in_order) < kInOrder * static_cast<double>(index.size());
  std::vector<int64_t> sizes;
  if (*none) return sizes;
  uint64_t bytes = 0;
  int64_t count = 0;
  for (uint64_t i = 0; i < index.size(); ++i) {
    bytes += index.entry(i).payload_len;
    ++count;
    if (bytes >= kShardBytes) sizes.push_back(count), bytes = 0, count = 0;
  }
  if (count > 0) sizes.push_back(count);
  return sizes;
}

}  // namespace

const char* lmdb_layout_name(LmdbLayout layout) {
  switch (layout) {
    case LmdbLayout::kPickleTuple:
      return "pickled tuple";
    case LmdbLayout::kPickleDict:
      return "pickled dict";
    case LmdbLayout::kDatum:
      return "Caffe Datum";
    case LmdbLayout::kRaw:
      break;
  }
  return "raw image";
}

Result<std::pair<std::shared_ptr<SpanSource>, LmdbInfo>> open_lmdb(const std::string& path,
                                                                   const LmdbOptions& options) {
  std::error_code ec;
  const std::string data = std::filesystem::is_directory(path, ec) ? path + "/data.mdb" : path;
  CHUTE_ASSIGN_OR_RETURN(auto file, MappedFile::open(data));
  const std::string note = scan_note(options);
  LmdbInfo info{.layout = LmdbLayout::kRaw, .keys_record = false, .data_file = data};
  const IndexRequest request{.kind = IndexKind::kSpan,
                             .cache_dir = options.cache_dir,
                             .subdir = "span-index",
                             .variant = note,
                             .header = kHeader,
                             .beside = {},
                             .matches = [&](const IndexView& v) { return span_scan_note(v).starts_with(note + " "); }};
  CHUTE_ASSIGN_OR_RETURN(
      CachedIndex index, load_file_index(*file, request, [&]() -> Result<std::vector<uint8_t>> {
        CHUTE_ASSIGN_OR_RETURN(Scan s, scan(*file, options));
        // The note records what was found too (layout, order), for an open from the cache.
        const std::string found = note + " layout=" + std::to_string(static_cast<int>(s.info.layout)) +
                                  " keys_record=" + (s.info.keys_record ? "1" : "0");
        return encode_file_index(IndexKind::kSpan, *file, s.entries, s.keys, span_notes(found, s.bad), kHeader);
      }));
  const std::string found = span_scan_note(index.view);
  if (const size_t at = found.find(" layout="); at != std::string::npos && at + 8 < found.size()) {
    info.layout = static_cast<LmdbLayout>(std::clamp(found[at + 8] - '0', 0, 3));
    info.keys_record = found.ends_with("keys_record=1");
  }
  bool no_shards = false;
  std::vector<int64_t> shards = shards_of(index.view, &no_shards);
  std::vector<SpanPart> parts;
  parts.push_back({.file = file, .owner = {}, .memory = {}, .name = data, .index = std::move(index)});
  CHUTE_ASSIGN_OR_RETURN(
      auto source,
      SpanSource::create(std::move(parts),
                         {.unwrap = {}, .shard_sizes = std::move(shards), .no_shards = no_shards, .labels = {}}));
  return std::make_pair(std::move(source), std::move(info));
}

}  // namespace chute
