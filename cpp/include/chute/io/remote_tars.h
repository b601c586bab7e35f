// The indexes of tar shards in object storage, which give every tar's samples (and so the dataset's size,
// the ranks' shares and the shard-window order) before the tars are read.
//
// A tar's members are known only by reading it. chute keeps exact, deterministic epochs (the same batches
// from a local copy and from the bucket, equal step counts on every rank, exact resume: docs/REMOTE.md,
// "Tar shards"), and those need every tar's sample count at open, so a remote tar's index comes, in order:
//   1. from the node's index cache: one learned from an earlier stream of the same object (its URL, ETag
//      and size name it), in "<index_dir>/tar-index/remote-<hash>.chidx";
//   2. from its sidecar "<tar>.chidx" in storage (`chute index` writes it beside a local tar, to be uploaded
//      with it): fetched for every tar at once, small requests; a URL with a query string (presigned) has
//      none, and a 403 or 404 means none;
//   3. else from the tar itself, streamed once and indexed as it passes (index_streamed_tar), before the
//      open returns: the price of a dataset without indexes, paid once per node (the index is then kept).
// An index describes a tar when it is of kind tar, with one shard of the tar's name and size; its content
// fingerprint is checked against the bytes when they arrive (the stream's check).
// Thread-safety: plain functions.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chute/io/index_cache.h"
#include "chute/remote/object_store.h"

namespace chute {

// The name a tar's index gives it: the last component of its URL's path (without a query string).
std::string tar_object_name(const std::string& url);

// Per tar, its index from the node's cache or its sidecar (1 and 2 above), or nullopt. `index_dir` "":
// no node cache (cache='none'): sidecars are still fetched, and kept in memory only.
Result<std::vector<std::optional<CachedIndex>>> find_tar_indexes(const ObjectStore& store,
                                                                 const std::vector<ObjectInfo>& tars,
                                                                 const std::string& index_dir);

// The index of a tar whose bytes streamed in, kept in the node's cache (best effort; `index_dir` "": in
// memory only).
Result<CachedIndex> index_streamed_tar(const ObjectInfo& tar, std::span<const uint8_t> bytes,
                                       const std::string& index_dir);

}  // namespace chute
