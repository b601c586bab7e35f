// The shard cache's keys for remote objects: one format, written here only. Its writers are the remote
// packed dataset's index (packed_source.cc) and shards (shard_stream.cc), and objects fetched whole
// (object_fetch.h: tar shards).
//
// A key is "<url>#<version>". The URL comes without credentials (keys show in errors and `chute cache ls`,
// and are stored on disk: redact_url()); the version names the bytes, so that an object replaced at the
// same URL is never served from an old entry:
//   - an object as stat() found it: "<etag>#<size>";
//   - a packed shard: its content id (the hash of its record headers, which the index lists) as 16 hex
//     digits, so that a shard needs no stat() before its fetch.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chute/remote/object_store.h"

namespace chute {

// The key of an object as ObjectStore::stat() or expand() found it: its URL, ETag and size.
std::string cache_key(const ObjectInfo& object);
// The key of the object at `url` whose content is `content_id` (a packed shard's id).
std::string cache_key(std::string_view url, uint64_t content_id);

}  // namespace chute
