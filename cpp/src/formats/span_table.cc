#include "chute/formats/span_table.h"

#include <filesystem>

namespace chute {

Result<std::shared_ptr<SpanSource>> open_span_table(std::vector<SpanTable> tables, SpanOptions options) {
  std::vector<SpanPart> parts;
  for (SpanTable& t : tables) {
    const std::span<const uint8_t> bytes = t.file ? t.file->bytes() : t.memory;
    const size_t n = t.offsets.size();
    if (t.lengths.size() != n || t.labels.size() != n)
      return invalid_argument(t.name + ": " + std::to_string(n) + " offsets, " + std::to_string(t.lengths.size()) +
                              " lengths and " + std::to_string(t.labels.size()) + " labels");
    std::vector<IndexEntry> entries(n);
    std::string keys;
    for (size_t i = 0; i < n; ++i) {
      if (t.offsets[i] > bytes.size() || t.lengths[i] > bytes.size() - t.offsets[i])
        return corrupt_data(t.name + ": sample " + std::to_string(t.first_key + i) + " at offset " +
                            std::to_string(t.offsets[i]) + " (" + std::to_string(t.lengths[i]) +
                            " bytes) is past the end of its " + std::to_string(bytes.size()) + " bytes");
      const std::string key = std::to_string(t.first_key + i);
      entries[i] = {.offset = t.offsets[i],
                    .payload_len = t.lengths[i],
                    .label = t.labels[i],
                    .key_offset = keys.size(),
                    .shard = 0,
                    .key_len = static_cast<uint32_t>(key.size()),
                    .source_bytes = t.lengths[i]};
      keys += key;
    }
    // The index names its one shard by a file name, never a path (IndexView::parse refuses one).
    std::string file = std::filesystem::path(t.name).filename().string();
    if (file.empty() || file == "." || file == "..") file = "table";
    const ShardInfo shard{.name = std::move(file),
                          .shard_id = 0,
                          .file_size = bytes.size(),
                          .record_count = n,
                          .first_sample = 0,
                          .mtime_ns = 0};
    auto encoded = std::make_shared<const std::vector<uint8_t>>(
        encode_index(IndexKind::kSpan, {shard}, entries, keys, span_notes("table", t.bad)));
    CHUTE_ASSIGN_OR_RETURN(IndexView view, IndexView::parse(*encoded, t.name + " (index)"));
    parts.push_back({.file = std::move(t.file),
                     .owner = std::move(t.owner),
                     .memory = t.memory,
                     .name = std::move(t.name),
                     .index = {.owner = encoded, .view = std::move(view), .path = ""}});
  }
  return SpanSource::create(std::move(parts), std::move(options));
}

}  // namespace chute
