#include "chute/io/packed_format.h"

#define XXH_INLINE_ALL  // libxxhash-dev's header, compiled in: no run-time library to ship with the wheel
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/detail/little_endian.h"

namespace chute {

using detail::load_le;
using detail::store_le;

namespace {

std::string hex64(uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

bool version_known(uint32_t version) { return version >= kOldestFormatVersion && version <= kFormatVersion; }

Status version_error(uint32_t version, const std::string& what) {
  const std::string reads =
      "versions " + std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion);
  if (version > kFormatVersion)
    return unsupported(what + ": format version " + std::to_string(version) +
                       " was written by a newer chute; this chute reads " + reads + " (upgrade chute)");
  return unsupported(what + ": unknown format version " + std::to_string(version) + " (this chute reads " + reads +
                     ")");
}

// A name taken from an index: non-empty, one path component, so that it cannot point outside the dataset.
bool safe_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace

uint64_t checksum(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

const char* record_kind_name(RecordKind kind) {
  switch (kind) {
    case RecordKind::kJpeg:
      return "jpeg";
    case RecordKind::kPng:
      return "png";
    case RecordKind::kWebp:
      return "webp";
    case RecordKind::kReencodedJpeg:
      return "jpeg-reencoded";
    case RecordKind::kRawZstd:
      return "raw-zstd";
    case RecordKind::kRaw:
      return "raw";
    case RecordKind::kUnknown:
      break;
  }
  return "unknown";
}

std::vector<uint8_t> encode_shard_header(const ShardHeader& h) {
  std::vector<uint8_t> out(kShardHeaderSize, 0);
  std::memcpy(out.data(), kShardMagic, 8);
  store_le<uint32_t>(out.data() + 16, h.version);
  store_le<uint32_t>(out.data() + 20, static_cast<uint32_t>(kShardHeaderSize));
  store_le<uint64_t>(out.data() + 24, h.shard_id);
  store_le<uint64_t>(out.data() + 32, h.record_count);
  store_le<uint64_t>(out.data() + 40, h.file_size);
  store_le<uint32_t>(out.data() + 48, h.part);
  store_le<uint32_t>(out.data() + 52, h.number);
  store_le<uint64_t>(out.data() + 8, checksum(std::span(out).subspan(16)));
  return out;
}

Result<ShardHeader> parse_shard_header(std::span<const uint8_t> file, const std::string& what) {
  if (file.size() < kShardHeaderSize)
    return corrupt_data(what + ": " + std::to_string(file.size()) + " bytes, shorter than a shard header (truncated?)");
  if (std::memcmp(file.data(), kShardMagic, 8) != 0) return corrupt_data(what + ": not a chute shard (wrong magic)");
  ShardHeader h;
  h.version = load_le<uint32_t>(file.data() + 16);
  if (!version_known(h.version)) return version_error(h.version, what);
  if (load_le<uint32_t>(file.data() + 20) != kShardHeaderSize) return corrupt_data(what + ": bad shard header size");
  if (load_le<uint64_t>(file.data() + 8) != checksum(file.subspan(16, kShardHeaderSize - 16)))
    return corrupt_data(what + ": shard header checksum mismatch");
  h.shard_id = load_le<uint64_t>(file.data() + 24);
  h.record_count = load_le<uint64_t>(file.data() + 32);
  h.file_size = load_le<uint64_t>(file.data() + 40);
  h.part = load_le<uint32_t>(file.data() + 48);
  h.number = load_le<uint32_t>(file.data() + 52);
  if (h.file_size != file.size())
    return corrupt_data(what + ": " + std::to_string(file.size()) + " bytes, but its header says " +
                        std::to_string(h.file_size) +
                        (file.size() < h.file_size ? " (truncated)" : " (trailing bytes)"));
  return h;
}

std::vector<uint8_t> encode_record_header(std::string_view key, std::span<const uint8_t> payload, int64_t label) {
  std::vector<uint8_t> out(kRecordHeaderSize, 0);
  store_le<uint32_t>(out.data() + 8, kRecordMagic);
  store_le<uint32_t>(out.data() + 12, static_cast<uint32_t>(key.size()));
  store_le<uint64_t>(out.data() + 16, payload.size());
  store_le<int64_t>(out.data() + 24, label);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, out.data() + 8, kRecordHeaderSize - 8);
  XXH3_64bits_update(&state, key.data(), key.size());
  XXH3_64bits_update(&state, payload.data(), payload.size());
  store_le<uint64_t>(out.data() + 0, XXH3_64bits_digest(&state));
  return out;
}

Result<std::span<const uint8_t>> parse_record(std::span<const uint8_t> shard, const IndexEntry& e, bool verify) {
  if (e.offset > shard.size())
    return corrupt_data("record header at offset " + std::to_string(e.offset) + " is past the end of the shard (" +
                        std::to_string(shard.size()) + " bytes)");
  return parse_record_copy(shard.subspan(e.offset), shard.size(), e, verify);
}

Result<std::span<const uint8_t>> parse_record_copy(std::span<const uint8_t> record, uint64_t shard_size,
                                                   const IndexEntry& e, bool verify) {
  // `record` starts at e.offset; `record.size()` is what the shard holds from there on.
  if (record.size() < kRecordHeaderSize)
    return corrupt_data("record header at offset " + std::to_string(e.offset) + " is past the end of the shard (" +
                        std::to_string(shard_size) + " bytes)");
  const uint8_t* p = record.data();
  if (load_le<uint32_t>(p + 8) != kRecordMagic)
    return corrupt_data("no record at offset " + std::to_string(e.offset) + " (bad record magic)");
  const uint32_t key_len = load_le<uint32_t>(p + 12);
  const uint64_t payload_len = load_le<uint64_t>(p + 16);
  const int64_t label = load_le<int64_t>(p + 24);
  uint64_t end = 0;  // relative to the record's start
  if (add_overflows(kRecordHeaderSize, key_len, &end) || add_overflows(end, payload_len, &end) || end > record.size())
    return corrupt_data("record length " + std::to_string(payload_len) + " at offset " + std::to_string(e.offset) +
                        " runs past the end of the shard (" + std::to_string(shard_size) + " bytes)");
  if (key_len != e.key_len || payload_len != e.payload_len || label != e.label) {
    std::string fields;  // only the fields that differ, so the message never shows two equal values
    auto differs = [&](const char* field, auto in_index, auto in_record) {
      if (in_index == in_record) return;
      fields += (fields.empty() ? "" : "; ") + std::string(field) + ": index " + std::to_string(in_index) +
                ", record " + std::to_string(in_record);
    };
    differs("payload length", e.payload_len, payload_len);
    differs("key length", e.key_len, key_len);
    differs("label", e.label, label);
    return corrupt_data("the index disagrees with the shard (" + fields + ")");
  }
  if (verify) {
    const uint64_t stored = load_le<uint64_t>(p);
    const uint64_t computed = checksum(record.subspan(8, end - 8));
    if (stored != computed)
      return corrupt_data("checksum mismatch: stored " + hex64(stored) + ", computed " + hex64(computed) +
                          " (the record's bytes changed after packing)");
  }
  return record.subspan(kRecordHeaderSize + key_len, payload_len);
}

IndexEntry IndexView::entry(uint64_t i) const {
  const uint8_t* p = bytes_.data() + entries_offset_ + i * entry_size_;
  IndexEntry e{load_le<uint64_t>(p),      load_le<uint64_t>(p + 8),  load_le<int64_t>(p + 16),
               load_le<uint64_t>(p + 24), load_le<uint32_t>(p + 32), load_le<uint32_t>(p + 36)};
  if (version_ >= 2) {  // parse() checked the kind
    e.source_bytes = load_le<uint64_t>(p + 40);
    e.kind = static_cast<RecordKind>(load_le<uint32_t>(p + 48));
    e.width = load_le<uint32_t>(p + 52);
    e.height = load_le<uint32_t>(p + 56);
  } else {
    e.source_bytes = e.payload_len;
  }
  return e;
}

std::string_view IndexView::key(const IndexEntry& e) const {
  return {reinterpret_cast<const char*>(bytes_.data() + strings_offset_ + e.key_offset), e.key_len};
}

Result<IndexView> IndexView::parse(std::span<const uint8_t> b, const std::string& what) {
  if (b.size() < kIndexHeaderSize)
    return corrupt_data(what + ": " + std::to_string(b.size()) + " bytes, shorter than an index header (truncated?)");
  if (std::memcmp(b.data(), kIndexMagic, 8) != 0) return corrupt_data(what + ": not a chute index (wrong magic)");
  const uint32_t version = load_le<uint32_t>(b.data() + 16);
  if (!version_known(version)) return version_error(version, what);
  if (load_le<uint32_t>(b.data() + 20) != kIndexHeaderSize) return corrupt_data(what + ": bad index header size");
  if (load_le<uint64_t>(b.data() + 8) != checksum(b.subspan(16)))
    return corrupt_data(what + ": index checksum mismatch (truncated or modified after packing)");
  IndexView v;
  v.bytes_ = b;
  const uint32_t kind = load_le<uint32_t>(b.data() + 24);
  if (kind != static_cast<uint32_t>(IndexKind::kPacked) && kind != static_cast<uint32_t>(IndexKind::kTar) &&
      kind != static_cast<uint32_t>(IndexKind::kSpan))
    return corrupt_data(what + ": unknown index kind " + std::to_string(kind));
  v.kind_ = static_cast<IndexKind>(kind);
  v.tar_identity_ = {load_le<uint64_t>(b.data() + 96), load_le<int64_t>(b.data() + 104),
                     load_le<uint64_t>(b.data() + 112)};
  v.version_ = version;
  v.entry_size_ = version >= 2 ? kIndexEntrySize : kIndexEntrySizeV1;
  if (load_le<uint32_t>(b.data() + 28) != v.entry_size_) return corrupt_data(what + ": bad index entry size");
  v.num_samples_ = load_le<uint64_t>(b.data() + 32);
  const uint64_t num_shards = load_le<uint64_t>(b.data() + 40), num_classes = load_le<uint64_t>(b.data() + 48);
  const uint64_t shards_off = load_le<uint64_t>(b.data() + 56), classes_off = load_le<uint64_t>(b.data() + 64);
  const uint64_t entries_off = load_le<uint64_t>(b.data() + 72), strings_off = load_le<uint64_t>(b.data() + 80);
  const uint64_t strings_size = load_le<uint64_t>(b.data() + 88);

  // Sections in order, each aligned and inside the file; the string section ends the file.
  uint64_t shards_end, classes_end, entries_end, strings_end, n;
  if (num_shards > UINT32_MAX || mul_overflows(num_shards, kShardEntrySize, &n) ||
      add_overflows(shards_off, n, &shards_end) || mul_overflows(num_classes, kClassEntrySize, &n) ||
      add_overflows(classes_off, n, &classes_end) || mul_overflows(v.num_samples_, v.entry_size_, &n) ||
      add_overflows(entries_off, n, &entries_end) || add_overflows(strings_off, strings_size, &strings_end) ||
      shards_off < kIndexHeaderSize || classes_off < shards_end || entries_off < classes_end ||
      strings_off < entries_end || strings_end != b.size() || (shards_off | classes_off | entries_off) % kAlignment)
    return corrupt_data(what + ": section table out of bounds (truncated or corrupt index)");
  v.entries_offset_ = entries_off;
  v.strings_offset_ = strings_off;
  auto string_at = [&](uint64_t off, uint32_t len, std::string* out) {
    uint64_t end;
    if (add_overflows(off, len, &end) || end > strings_size) return false;
    out->assign(reinterpret_cast<const char*>(b.data() + strings_off + off), len);
    return true;
  };

  uint64_t next_first = 0;
  v.shards_.resize(num_shards);
  for (uint64_t s = 0; s < num_shards; ++s) {
    const uint8_t* p = b.data() + shards_off + s * kShardEntrySize;
    ShardInfo& info = v.shards_[s];
    info.shard_id = load_le<uint64_t>(p);
    info.file_size = load_le<uint64_t>(p + 8);
    info.record_count = load_le<uint64_t>(p + 16);
    info.first_sample = load_le<uint64_t>(p + 24);
    info.mtime_ns = load_le<int64_t>(p + 32);
    if (!string_at(load_le<uint64_t>(p + 40), load_le<uint32_t>(p + 48), &info.name) || !safe_file_name(info.name))
      return corrupt_data(what + ": shard " + std::to_string(s) + " has a bad file name");
    if (info.first_sample != next_first || add_overflows(next_first, info.record_count, &next_first))
      return corrupt_data(what + ": shard " + info.name + " does not start where the previous shard ends");
  }
  if (next_first != v.num_samples_)
    return corrupt_data(what + ": the shards hold " + std::to_string(next_first) + " records, the index lists " +
                        std::to_string(v.num_samples_));
  v.classes_.resize(num_classes);
  for (uint64_t c = 0; c < num_classes; ++c) {
    const uint8_t* p = b.data() + classes_off + c * kClassEntrySize;
    if (!string_at(load_le<uint64_t>(p), load_le<uint32_t>(p + 8), &v.classes_[c]))
      return corrupt_data(what + ": class " + std::to_string(c) + " has a bad name");
  }

  // Every entry: in its shard's range, inside the shard file, after the previous record of that shard.
  const bool packed = v.kind_ == IndexKind::kPacked;
  uint32_t shard = 0;
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < v.num_samples_; ++i) {
    while (shard < num_shards && i >= v.shards_[shard].first_sample + v.shards_[shard].record_count) {
      ++shard;
      prev_end = 0;
    }
    const IndexEntry e = v.entry(i);
    const ShardInfo& info = v.shards_[shard];
    auto bad = [&](const std::string& why) {
      return corrupt_data(what + ": record " + std::to_string(i) + " (shard " + info.name + "): " + why);
    };
    if (e.shard != shard) return bad("listed in shard " + std::to_string(e.shard) + ", out of order");
    if (version >= 2 && load_le<uint32_t>(b.data() + entries_off + i * v.entry_size_ + 48) > kLastRecordKind)
      return bad("unknown record kind " + std::to_string(static_cast<uint32_t>(e.kind)));
    uint64_t end, key_end;
    if (add_overflows(e.key_offset, e.key_len, &key_end) || key_end > strings_size) return bad("key out of bounds");
    const uint64_t body = packed ? uint64_t{kRecordHeaderSize} + e.key_len : 0;
    if (add_overflows(e.offset, body, &end) || add_overflows(end, e.payload_len, &end) || end > info.file_size)
      return bad("offset " + std::to_string(e.offset) + " + length " + std::to_string(e.payload_len) +
                 " is past the end of the shard (" + std::to_string(info.file_size) + " bytes)");
    const uint64_t min_offset = packed ? std::max<uint64_t>(prev_end, kShardHeaderSize) : 0;
    if (e.offset < min_offset || (packed && e.offset % kAlignment))
      return bad("offset " + std::to_string(e.offset) + " overlaps the previous record or header");
    prev_end = end;
  }
  return v;
}

std::vector<uint8_t> encode_index(IndexKind kind, const std::vector<ShardInfo>& shards,
                                  const std::vector<IndexEntry>& entries, std::string_view keys,
                                  const std::vector<std::string>& classes, const TarIdentity& tar) {
  std::string strings(keys);
  const size_t shards_off = kIndexHeaderSize;
  const size_t classes_off = shards_off + shards.size() * kShardEntrySize;
  const size_t entries_off = classes_off + classes.size() * kClassEntrySize;
  const size_t strings_off = entries_off + entries.size() * kIndexEntrySize;
  std::vector<uint8_t> out(strings_off, 0);
  for (size_t s = 0; s < shards.size(); ++s) {
    const size_t p = shards_off + s * kShardEntrySize;
    store_le<uint64_t>(out.data() + p, shards[s].shard_id);
    store_le<uint64_t>(out.data() + p + 8, shards[s].file_size);
    store_le<uint64_t>(out.data() + p + 16, shards[s].record_count);
    store_le<uint64_t>(out.data() + p + 24, shards[s].first_sample);
    store_le<int64_t>(out.data() + p + 32, shards[s].mtime_ns);
    store_le<uint64_t>(out.data() + p + 40, strings.size());
    store_le<uint32_t>(out.data() + p + 48, static_cast<uint32_t>(shards[s].name.size()));
    strings += shards[s].name;
  }
  for (size_t c = 0; c < classes.size(); ++c) {
    const size_t p = classes_off + c * kClassEntrySize;
    store_le<uint64_t>(out.data() + p, strings.size());
    store_le<uint32_t>(out.data() + p + 8, static_cast<uint32_t>(classes[c].size()));
    strings += classes[c];
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t p = entries_off + i * kIndexEntrySize;
    const IndexEntry& e = entries[i];
    store_le<uint64_t>(out.data() + p, e.offset);
    store_le<uint64_t>(out.data() + p + 8, e.payload_len);
    store_le<int64_t>(out.data() + p + 16, e.label);
    store_le<uint64_t>(out.data() + p + 24, e.key_offset);
    store_le<uint32_t>(out.data() + p + 32, e.shard);
    store_le<uint32_t>(out.data() + p + 36, e.key_len);
    store_le<uint64_t>(out.data() + p + 40, e.source_bytes);
    store_le<uint32_t>(out.data() + p + 48, static_cast<uint32_t>(e.kind));
    store_le<uint32_t>(out.data() + p + 52, e.width);
    store_le<uint32_t>(out.data() + p + 56, e.height);
  }
  out.insert(out.end(), strings.begin(), strings.end());
  std::memcpy(out.data(), kIndexMagic, 8);
  store_le<uint32_t>(out.data() + 16, kFormatVersion);
  store_le<uint32_t>(out.data() + 20, static_cast<uint32_t>(kIndexHeaderSize));
  store_le<uint32_t>(out.data() + 24, static_cast<uint32_t>(kind));
  store_le<uint32_t>(out.data() + 28, static_cast<uint32_t>(kIndexEntrySize));
  store_le<uint64_t>(out.data() + 32, entries.size());
  store_le<uint64_t>(out.data() + 40, shards.size());
  store_le<uint64_t>(out.data() + 48, classes.size());
  store_le<uint64_t>(out.data() + 56, shards_off);
  store_le<uint64_t>(out.data() + 64, classes_off);
  store_le<uint64_t>(out.data() + 72, entries_off);
  store_le<uint64_t>(out.data() + 80, strings_off);
  store_le<uint64_t>(out.data() + 88, strings.size());
  store_le<uint64_t>(out.data() + 96, tar.inode);
  store_le<int64_t>(out.data() + 104, tar.ctime_ns);
  store_le<uint64_t>(out.data() + 112, tar.fingerprint);
  store_le<uint64_t>(out.data() + 8, checksum(std::span(out).subspan(16)));
  return out;
}

}  // namespace chute
