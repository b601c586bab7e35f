// PackedSource: a dataset written by `chute pack` (docs/FORMAT.md), read through one read-only mapping per
// shard and one for the index. Opening validates the index (checksum, every entry's bounds) and each
// shard's header against it; read(i) is then an O(1) lookup, a bounds-checked record parse, an optional
// XXH3 check of the record and one copy of the payload, with no system call.
// Thread-safety: immutable after open; every method may run on many threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chute/base/mapped_file.h"
#include "chute/io/packed_format.h"
#include "chute/io/shard_bytes.h"
#include "chute/io/shard_stream.h"
#include "chute/io/source.h"

namespace chute {

struct PackedOptions {
  // Check each record's XXH3 checksum on every read (costs ~1% of a JPEG decode; docs/FORMAT.md).
  bool verify_checksums = true;
};

class PackedSource final : public Source {
 public:
  // `path`: a dataset directory holding index.chidx, or the index file itself.
  static Result<std::shared_ptr<PackedSource>> open(const std::string& path, PackedOptions options = {});
  // A dataset in object storage: `url` is its prefix (s3://bucket/train/, https://host/data/; a URL with a
  // query string, such as a presigned one, names one object and is refused). The index is fetched (through
  // the cache, when there is one) at open; shards are streamed as the loader's order reaches them
  // (shard_stream.h). `cache` null: CachePolicy::kNone.
  static Result<std::shared_ptr<PackedSource>> open_remote(const std::string& url, std::shared_ptr<ObjectStore> store,
                                                           std::shared_ptr<ShardCache> cache,
                                                           ShardStream::Options remote = {},
                                                           PackedOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(index_.size()); }
  int64_t label(int64_t index) const override { return index_.entry(index).label; }
  // The record's key (the source file's path relative to the packed root).
  std::string name(int64_t index) const override;
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  // Refuses a record whose payload is over `max_bytes` from the index, before reading it.
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;
  // Each shard's record count: the format keeps shards contiguous (the index's shard table gives each
  // shard [first sample, first sample + record count), with no gap, checked at open; docs/FORMAT.md).
  std::vector<int64_t> shard_sizes() const override;

  const std::vector<std::string>& classes() const { return index_.classes(); }
  const std::vector<ShardInfo>& shards() const { return index_.shards(); }
  const std::string& directory() const { return dir_; }
  uint64_t payload_size(int64_t index) const { return index_.entry(index).payload_len; }
  // What the index records of the record: kind, stored size and source bytes (version 2; unknown in 1).
  IndexEntry entry(int64_t index) const { return index_.entry(static_cast<uint64_t>(index)); }
  uint32_t format_version() const { return index_.version(); }
  // Checks the record of every sample in [begin, end) and its checksum; returns the bad ones as
  // (index, error naming shard and record), in order. `progress(done)` is called every 4096 records and
  // stops the check early when it returns false.
  std::vector<std::pair<int64_t, Status>> verify(int64_t begin, int64_t end,
                                                 const std::function<bool(int64_t)>& progress = {}) const;
  // Remote datasets: the order's shards are fetched ahead of the readers, into memory the loader counts.
  void will_read(const EpochOrder& order, int64_t start) const override;
  SourceMemory memory_wanted(int64_t shard_window) const override;
  void set_memory(uint64_t bytes, int64_t shard_window) const override;
  // Null for a local dataset.
  const ShardStream* remote() const { return remote_.get(); }

 private:
  // Copies record `index` into `record` (under the shard's SIGBUS guard) and checks it; `payload` then
  // points into `record`.
  Status check_record(int64_t index, bool verify, std::vector<uint8_t>& record,
                      std::span<const uint8_t>* payload) const;

  std::string dir_;
  PackedOptions options_;
  std::shared_ptr<const void> index_owner_;  // the bytes `index_` reads: a mapping, or the fetched index
  IndexView index_;
  // The bytes of a record's shard: mapped at open for a local dataset, streamed for a remote one.
  Result<std::shared_ptr<const ShardBytes>> shard_bytes(uint32_t shard) const;

  std::vector<std::shared_ptr<const ShardBytes>> shard_files_;  // local
  std::shared_ptr<ShardStream> remote_;                         // remote
};

// "<dir>/index.chidx" when `path` is a directory, else `path`.
std::string index_path_for(const std::string& path);

// Maps shard `info` of the index at `index_path` (from the index's directory `dir`) and checks that its
// header agrees with the index: same shard id, record count and size.
Result<std::shared_ptr<const MappedFile>> open_shard(const std::string& dir, const ShardInfo& info,
                                                     const std::string& index_path);

}  // namespace chute
