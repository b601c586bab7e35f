#include "chute/formats/tfrecord_source.h"

#include <cstring>
#include <optional>

#include "chute/formats/tf_example.h"
#include "chute/formats/tfrecord.h"

namespace chute {
namespace {

constexpr const char* kImageKeys[] = {"image/encoded", "image"};
constexpr const char* kLabelKeys[] = {"image/class/label", "label"};

std::string listing(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string out;
  for (const auto& [name, kind] : features) out += (out.empty() ? "" : ", ") + name + " (" + kind + ")";
  return out.empty() ? "none" : out;
}

// The layout from the first record of the first file that has one.
Result<TfRecordLayout> detect(const MappedFile& file, const TfRecord& first, const TfRecordOptions& options) {
  const std::string at = file.path() + ": record 0 at offset " + std::to_string(first.offset);
  const auto record = file.bytes().subspan(first.offset, first.size + kTfRecordFooterSize);
  Status st = check_tfrecord_crc(record);
  if (!st.is_ok()) return Status(st.code(), at + ": " + st.message());
  auto features = parse_example(record.first(first.size));
  if (!features.is_ok()) return Status(features.status().code(), at + ": " + features.status().message());
  TfRecordLayout layout;
  for (const ExampleFeature& f : *features)
    layout.features.emplace_back(std::string(f.name), feature_kind_name(f.kind));
  auto kind_of = [&](const std::string& name) {
    const ExampleFeature* f = find_feature(*features, name);
    return f == nullptr ? FeatureKind::kNone : f->kind;
  };
  const std::string found = "; its features: " + listing(layout.features);
  if (!options.image_key.empty()) {
    if (kind_of(options.image_key) != FeatureKind::kBytes)
      return invalid_argument(at + ": no bytes feature '" + options.image_key + "' (image_key)" + found);
    layout.image_key = options.image_key;
  } else {
    for (const char* k : kImageKeys)
      if (layout.image_key.empty() && kind_of(k) == FeatureKind::kBytes) layout.image_key = k;
    if (layout.image_key.empty())
      return invalid_argument(at + ": no image feature ('image/encoded' or 'image', bytes)" + found +
                              ". Name it with image_key=");
  }
  if (!options.label_key.empty()) {
    if (kind_of(options.label_key) != FeatureKind::kInt64)
      return invalid_argument(at + ": no int64 feature '" + options.label_key + "' (label_key)" + found);
    layout.label_key = options.label_key;
  } else {
    for (const char* k : kLabelKeys)
      if (layout.label_key.empty() && kind_of(k) == FeatureKind::kInt64) layout.label_key = k;
  }
  return layout;
}

// The index of one file: a span per record (its data and CRC), its label, its number as the key.
std::vector<uint8_t> scan_file(const MappedFile& file, const std::vector<TfRecord>& records,
                               const TfRecordLayout& layout, const std::string& scan) {
  std::vector<IndexEntry> entries;
  entries.reserve(records.size());
  std::string keys;
  for (const TfRecord& r : records) {
    const auto record = file.bytes().subspan(r.offset, r.size + kTfRecordFooterSize);
    int64_t label = -1;  // a record that fails here fails again when read: its error is the sample's then
    if (!layout.label_key.empty() && check_tfrecord_crc(record).is_ok())
      if (auto features = parse_example(record.first(r.size)); features.is_ok())
        if (const ExampleFeature* f = find_feature(*features, layout.label_key);
            f != nullptr && f->kind == FeatureKind::kInt64 && f->count > 0)
          label = f->first_int;
    const std::string key = std::to_string(entries.size());
    entries.push_back({.offset = r.offset,
                       .payload_len = r.size + kTfRecordFooterSize,
                       .label = label,
                       .key_offset = keys.size(),
                       .shard = 0,
                       .key_len = static_cast<uint32_t>(key.size()),
                       .source_bytes = r.size});
    keys += key;
  }
  return encode_file_index(IndexKind::kSpan, file, entries, keys, span_notes(scan, {}), kTfRecordHeaderSize);
}

}  // namespace

Result<std::pair<std::shared_ptr<SpanSource>, TfRecordLayout>> open_tfrecord(const std::vector<std::string>& paths,
                                                                             const TfRecordOptions& options) {
  if (paths.empty()) return invalid_argument("no TFRecord file to open");
  std::vector<std::shared_ptr<const MappedFile>> files;
  for (const std::string& path : paths) {
    CHUTE_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
    files.push_back(std::move(file));
  }
  // The layout, from the first record there is (its header alone is read: no scan of the file).
  std::optional<TfRecordLayout> layout;
  for (const auto& file : files) {
    if (file->bytes().empty()) continue;
    CHUTE_ASSIGN_OR_RETURN(const TfRecord first, read_tfrecord_header(file->bytes(), 0, 0, file->path()));
    CHUTE_ASSIGN_OR_RETURN(layout, detect(*file, first, options));
    break;
  }
  if (!layout)
    return invalid_argument("no record in " + paths.front() + (paths.size() > 1 ? " or the other files" : ""));
  const std::string scan = "tfrecord image_key=" + layout->image_key + " label_key=" + layout->label_key;
  std::vector<SpanPart> parts;
  for (const auto& file : files) {
    const IndexRequest request{.kind = IndexKind::kSpan,
                               .cache_dir = options.cache_dir,
                               .subdir = "span-index",
                               .variant = scan,
                               .header = kTfRecordHeaderSize,
                               .beside = {},
                               .matches = [&](const IndexView& v) { return span_scan_note(v) == scan; }};
    CHUTE_ASSIGN_OR_RETURN(CachedIndex index, load_file_index(*file, request, [&]() -> Result<std::vector<uint8_t>> {
                             CHUTE_ASSIGN_OR_RETURN(auto records, scan_tfrecord(file->bytes(), file->path()));
                             return scan_file(*file, records, *layout, scan);
                           }));
    parts.push_back({.file = file, .owner = {}, .memory = {}, .name = file->path(), .index = std::move(index)});
  }
  const std::string image_key = layout->image_key;
  SpanOptions span{.unwrap = [image_key, verify = options.verify](std::vector<uint8_t>& bytes) -> Status {
                     if (verify) CHUTE_RETURN_IF_ERROR(check_tfrecord_crc(bytes));
                     const std::span<const uint8_t> data(bytes.data(), bytes.size() - kTfRecordFooterSize);
                     CHUTE_ASSIGN_OR_RETURN(auto features, parse_example(data));
                     const ExampleFeature* f = find_feature(features, image_key);
                     if (f == nullptr || f->kind != FeatureKind::kBytes || f->count == 0)
                       return corrupt_data("the record has no bytes feature '" + image_key + "' (image_key)");
                     const size_t at = static_cast<size_t>(f->first_bytes.data() - bytes.data()),
                                  n = f->first_bytes.size();
                     std::memmove(bytes.data(), bytes.data() + at, n);
                     bytes.resize(n);
                     return Status::ok();
                   },
                   .shard_sizes = {},
                   .no_shards = false,
                   .labels = {}};
  CHUTE_ASSIGN_OR_RETURN(auto source, SpanSource::create(std::move(parts), std::move(span)));
  return std::make_pair(std::move(source), std::move(*layout));
}

}  // namespace chute
