// The packed shard format (docs/FORMAT.md): byte layout, constants and the bounds-checked parsers shared
// by the reader, the writer, the tar indexer and the fuzz target.
//
// A dataset is a directory of shard files (records: header, key, payload) and one index file (every
// sample's shard, offset, lengths, label and key, plus the shard table and class names). All integers are
// little-endian; sections and records start on 8-byte boundaries. Every parser here takes bytes from disk
// as hostile: each offset and length is checked, with overflow-safe arithmetic, before it is used.
// Thread-safety: plain functions and values; IndexView is immutable and may be read from many threads.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chute/base/status.h"

namespace chute {

static_assert(std::endian::native == std::endian::little, "the packed format is read in place: little-endian only");

inline constexpr char kShardMagic[8] = {'C', 'H', 'U', 'T', 'E', 'S', 'H', 'D'};
inline constexpr char kIndexMagic[8] = {'C', 'H', 'U', 'T', 'E', 'I', 'D', 'X'};
inline constexpr uint32_t kRecordMagic = 0x31434552;  // "REC1"
// The version this chute writes. It reads every version from kOldestFormatVersion on: version 1's index
// entries lack what version 2 records per record (kind, stored size, source bytes), read as unknown.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestFormatVersion = 1;
inline constexpr size_t kShardHeaderSize = 64;
inline constexpr size_t kIndexHeaderSize = 128;
inline constexpr size_t kRecordHeaderSize = 32;
inline constexpr size_t kIndexEntrySize = 64;  // version 2
inline constexpr size_t kIndexEntrySizeV1 = 40;
inline constexpr size_t kShardEntrySize = 56;
inline constexpr size_t kClassEntrySize = 16;
inline constexpr size_t kAlignment = 8;
inline constexpr const char* kIndexFileName = "index.chidx";
inline constexpr const char* kShardExtension = ".chute";

// What an index describes: chute's own shards, members of plain tar files, or spans of another format's
// file or memory (span_source.h: TFRecord records, the images inside an LMDB's values, ...).
enum class IndexKind : uint32_t { kPacked = 1, kTar = 2, kSpan = 3 };

// XXH3-64 (libxxhash) of `bytes`: the record, header and index checksum.
uint64_t checksum(std::span<const uint8_t> bytes);

inline size_t align_up(size_t n) { return (n + kAlignment - 1) & ~(kAlignment - 1); }
// a + b, or false when it overflows.
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

struct ShardHeader {
  uint32_t version = kFormatVersion;
  uint64_t shard_id = 0;  // random; the index stores it, so a shard from another pack is refused
  uint64_t record_count = 0;
  uint64_t file_size = 0;  // the complete file's size: a truncated shard is caught at open
  uint32_t part = 0;       // which --part wrote it, and its number within that part
  uint32_t number = 0;
};

struct RecordHeader {
  uint64_t checksum = 0;  // XXH3-64 of the record's bytes after this field: the rest of the header, key, payload
  uint32_t key_len = 0;
  uint64_t payload_len = 0;
  int64_t label = 0;
};

// What a record's payload holds (`chute pack`'s choice for it). kUnknown: not recorded (a version 1
// index, a tar member, or a pack that did not check its images).
enum class RecordKind : uint32_t {
  kUnknown = 0,
  kJpeg = 1,           // the source's JPEG bytes, unchanged
  kPng = 2,            // the source's PNG bytes, unchanged
  kWebp = 3,           // the source's WebP bytes, unchanged
  kReencodedJpeg = 4,  // decoded, resized (maybe) and encoded again as JPEG
  kRawZstd = 5,        // raw RGB pixels (raw_image.h), zstd-compressed
  kRaw = 6,            // raw RGB pixels, uncompressed
};
inline constexpr uint32_t kLastRecordKind = 6;
// "jpeg", "png", "webp", "jpeg-reencoded", "raw-zstd", "raw", "unknown".
const char* record_kind_name(RecordKind kind);

// One sample in the index. For packed shards `offset` is the record's start; for tar, the payload's.
struct IndexEntry {
  uint64_t offset = 0;
  uint64_t payload_len = 0;
  int64_t label = 0;
  uint64_t key_offset = 0;  // into the index's string section
  uint32_t shard = 0;
  uint32_t key_len = 0;
  // Version 2: the source file's size in bytes (payload_len when not recorded), what the payload holds,
  // and the stored image's size (0 x 0 when not recorded).
  uint64_t source_bytes = 0;
  RecordKind kind = RecordKind::kUnknown;
  uint32_t width = 0;
  uint32_t height = 0;
};

struct ShardInfo {
  std::string name;  // file name, relative to the index's directory (packed) or the tar's path (tar)
  uint64_t shard_id = 0;
  uint64_t file_size = 0;
  uint64_t record_count = 0;
  uint64_t first_sample = 0;
  int64_t mtime_ns = 0;  // tar: the file's mtime when indexed (a changed file is re-indexed); packed: 0
};

std::vector<uint8_t> encode_shard_header(const ShardHeader& h);
// Checks magic, version and header checksum of a shard's first bytes. `what` names the shard in errors.
Result<ShardHeader> parse_shard_header(std::span<const uint8_t> file, const std::string& what);

// The record's header bytes, checksum included, for `key` and `payload`.
std::vector<uint8_t> encode_record_header(std::string_view key, std::span<const uint8_t> payload, int64_t label);
inline size_t record_size(size_t key_len, size_t payload_len) {
  return align_up(kRecordHeaderSize + key_len + payload_len);
}
// The record at `entry.offset` in `shard` (a whole shard file): checks that it lies inside the file, that
// its header agrees with the index entry and, when `verify`, its checksum. Returns the payload. Error
// messages describe the record; the caller prefixes the shard's path and the record's index.
Result<std::span<const uint8_t>> parse_record(std::span<const uint8_t> shard, const IndexEntry& entry, bool verify);
// The same for `record`, a copy of the shard's bytes from `entry.offset` on (the whole record, or all the
// shard holds from there when that is less); messages cite offsets in the shard of `shard_size` bytes.
Result<std::span<const uint8_t>> parse_record_copy(std::span<const uint8_t> record, uint64_t shard_size,
                                                   const IndexEntry& entry, bool verify);

// Kinds tar and span: what identifies the indexed file beyond its shard entry's name, size and mtime
// (header bytes 96-119; 0 in packed indexes and in an index of memory).
struct TarIdentity {
  uint64_t inode = 0;
  int64_t ctime_ns = 0;
  uint64_t fingerprint = 0;
  bool operator==(const TarIdentity&) const = default;
};

// A validated index, read in place from its bytes (which must outlive the view).
class IndexView {
 public:
  // Validates everything: magic, version, checksum, section bounds, and every entry (shard number,
  // contiguous per shard in shard order, records inside the shard's recorded size and, for packed shards,
  // in order without overlapping: tar entries may share bytes, a link's and its target's). `what` names
  // the index file in errors.
  static Result<IndexView> parse(std::span<const uint8_t> bytes, const std::string& what);

  IndexKind kind() const { return kind_; }
  uint32_t version() const { return version_; }
  uint64_t size() const { return num_samples_; }
  IndexEntry entry(uint64_t i) const;
  std::string_view key(const IndexEntry& e) const;
  const std::vector<ShardInfo>& shards() const { return shards_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const TarIdentity& tar_identity() const { return tar_identity_; }

 private:
  std::span<const uint8_t> bytes_;
  IndexKind kind_ = IndexKind::kPacked;
  uint32_t version_ = kFormatVersion;
  size_t entry_size_ = kIndexEntrySize;
  uint64_t num_samples_ = 0;
  size_t entries_offset_ = 0;
  size_t strings_offset_ = 0;
  std::vector<ShardInfo> shards_;
  std::vector<std::string> classes_;
  TarIdentity tar_identity_;
};

// Serialises an index. `keys` holds the bytes every entry's (key_offset, key_len) points into.
std::vector<uint8_t> encode_index(IndexKind kind, const std::vector<ShardInfo>& shards,
                                  const std::vector<IndexEntry>& entries, std::string_view keys,
                                  const std::vector<std::string>& classes, const TarIdentity& tar = {});

}  // namespace chute
