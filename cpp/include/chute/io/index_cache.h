// Indexes derived from one data file (a tar's members, a TFRecord file's records, the spans of an LMDB's
// values), in chute's index format (packed_format.h, docs/FORMAT.md) with one shard: the file. Built by a
// one-time scan and cached apart from the data, in "<cache_dir>/<subdir>/<XXH3 of the file's absolute path
// and the scan's variant>.chidx", never beside the data unless asked for (`chute index` for tars).
//
// A cached index is used only while it describes the file as it is now: its shard's name, size and mtime,
// the file's inode and ctime, and a content fingerprint (content_fingerprint) all match, and so does what
// the caller checks (`matches`: the scan's parameters, for instance); anything else, a damaged index
// included, is rebuilt, never trusted. A cache directory that cannot be written keeps the index in memory.
// Thread-safety: plain functions; concurrent builders of one index (ranks of a job) each write a complete
// file and rename it into place (the last one wins, and all are equal).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chute/base/mapped_file.h"
#include "chute/io/packed_format.h"

namespace chute {

// XXH3-64 of the file's first and last 64 KiB and of the `header` bytes before up to 64 of `offsets`
// (evenly spaced; an entry's first byte, each a random read on a cold disk: few): a rewrite that keeps the
// size and mtime still changes it.
uint64_t content_fingerprint(std::span<const uint8_t> file, const std::vector<uint64_t>& offsets, size_t header);

// What an index records of the file it indexes: its name (the shard's), bytes (for its size and content
// fingerprint), and for a local file its mtime, inode and ctime (0 for a remote object, which has none).
struct IndexedFile {
  std::string name;
  std::span<const uint8_t> bytes;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  int64_t ctime_ns = 0;
};
IndexedFile indexed_file(const MappedFile& file);

// The index bytes of `kind` for `file`: one shard (its name, size, mtime), `entries` (shard 0, keys in
// `keys`), `notes` in the class table, and the file's identity with the fingerprint over `header` bytes
// before each entry.
std::vector<uint8_t> encode_file_index(IndexKind kind, const IndexedFile& file, const std::vector<IndexEntry>& entries,
                                       std::string_view keys, const std::vector<std::string>& notes, size_t header);
inline std::vector<uint8_t> encode_file_index(IndexKind kind, const MappedFile& file,
                                              const std::vector<IndexEntry>& entries, std::string_view keys,
                                              const std::vector<std::string>& notes, size_t header) {
  return encode_file_index(kind, indexed_file(file), entries, keys, notes, header);
}
// The fingerprint an index of `view`'s entries records for the bytes `file` (content_fingerprint over its
// entries' offsets): a file whose bytes give another is not the one the index describes.
uint64_t index_fingerprint(const IndexView& view, std::span<const uint8_t> file, size_t header);

struct CachedIndex {
  std::shared_ptr<const void> owner;  // the bytes `view` reads
  IndexView view;
  std::string path;  // the file it was read from or written to; "" when it is only in memory
};

struct IndexRequest {
  IndexKind kind = IndexKind::kTar;
  std::string cache_dir;            // "" keeps a built index in memory only
  std::string subdir;               // "tar-index", "span-index"
  std::string variant;              // what else the index depends on (the scan's parameters): part of the cache key
  size_t header = 0;                // content_fingerprint's `header`
  std::vector<std::string> beside;  // indexes to try before the cache (a tar's "<tar>.chidx")
  std::function<bool(const IndexView&)> matches;  // a further check of a found index; empty: none
};

// `file`'s index: the first of `beside`, then the cached one, that matches it; else `build()`'s bytes,
// written to the cache (best effort).
Result<CachedIndex> load_file_index(const MappedFile& file, const IndexRequest& request,
                                    const std::function<Result<std::vector<uint8_t>>()>& build);

}  // namespace chute
