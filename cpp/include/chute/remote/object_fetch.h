// fetch_object: one remote object, whole, into memory the caller owns (a reused buffer), through the node's
// disk cache when there is one: the one fetch path of remote datasets (packed shards and their index, tar
// shards and their indexes; io/shard_stream.h).
//
// With a cache: a hit is read from its entry (checked against its checksum: shard_cache.h); a miss is
// received from storage (ObjectStore::receive, in place), checked by the caller's `check`, handed to
// `ready` (the bytes may be used from then on; it is told where they came from), and only then written to
// the cache, by this thread. Without one: received, checked, ready. Either way no page-cache page is
// allocated per byte (docs/REMOTE.md).
//
// One version: every range of an object comes from one version of it (HttpEngine::receive, If-Match).
//   - An object listed with an ETag (a tar, a packed dataset's index) is pinned to that version, and its key
//     is cache_key(object). One replaced before its last byte arrived is stat()ed again and fetched anew
//     under the new version's key (`ready` and the result say which version came), up to the engine's
//     retry budget, then fails naming its URL. A new version of another size fails into a buffer of the
//     old size (the buffer-owning variant allocates one of the new size).
//   - An object without an ETag (a packed shard, keyed by its content id, which `check` verifies) is read in
//     whichever version answers first, and read again from the start when it changes meanwhile.
// The cache never holds a mix of versions, nor one version under another's key.
//
// Cancellation: the calling thread's CancelScope (chute/base/cancel.h) ends the requests and the cache
// lock's wait within ~0.1 s (kCancelled).
// Thread-safety: plain functions; a key is filled once at a time across threads and processes (the cache's
// lock).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "chute/base/buffer_pool.h"
#include "chute/base/status.h"
#include "chute/remote/object_store.h"
#include "chute/remote/shard_cache.h"

namespace chute {

// The check of an object's bytes as received (against an index); an error keeps them out of the cache.
using ObjectCheck = std::function<Status(std::span<const uint8_t> bytes)>;

// Whether the bytes came from the disk cache or from storage, and which version of the object they are.
enum class FetchedFrom { kCache, kStorage };
using ObjectReady = std::function<void(FetchedFrom from, const ObjectInfo& version)>;

// `object` (object.size bytes) into `dst` (exactly that size; page-aligned for O_DIRECT), under cache key
// `key`. `cache` may be null (no disk cache); `check` and `ready` may be empty. Errors name the object.
Result<FetchedFrom> fetch_object(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                 const std::string& key, std::span<uint8_t> dst, const ObjectCheck& check,
                                 const ObjectReady& ready = {});

// The same into a buffer of its own (an index, say), with the version it holds (buffer.capacity() may exceed
// version.size: whole pages).
struct FetchedObject {
  PageBuffer buffer;
  ObjectInfo version;
};
Result<FetchedObject> fetch_object(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                   const std::string& key, const ObjectCheck& check);

}  // namespace chute
