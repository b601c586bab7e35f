// An object fetched whole into the node's ShardCache, one version of it: what a dataset reads whole before
// it opens (a packed dataset's index, tar shards).
//
// The object is stat()ed, and its entry keyed by that version (cache_key.h: URL without credentials, ETag
// and size), so an object replaced at the same URL is never served from an old entry. Its download is pinned to that
// ETag (ObjectStore::download): an object replaced before its last byte arrived is stat()ed again and
// fetched anew under its new key, up to the engine's retry budget, then fails naming its URL. The entry
// never holds a mix of versions, nor one version under another's key.
// Thread-safety: as ObjectStore and ShardCache: any thread.
#pragma once

#include <memory>
#include <string_view>

#include "chute/base/mapped_file.h"
#include "chute/base/status.h"
#include "chute/remote/object_store.h"
#include "chute/remote/shard_cache.h"

namespace chute {

struct CachedObject {
  ObjectInfo info;  // the version in the cache
  std::shared_ptr<const MappedFile> file;
};

// `verify` (optional) checks the bytes before the cache admits them (ShardCache::get).
Result<CachedObject> cache_object(const ObjectStore& store, ShardCache& cache, std::string_view url,
                                  const ShardCache::Verify& verify = {});

}  // namespace chute
