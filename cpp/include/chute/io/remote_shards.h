// RemoteShards: the shard files of a packed dataset in object storage (s3://, gs://, http(s)://), fetched
// whole into the node's ShardCache and read there through a mapping, like a local shard.
//
// Why whole shards: a remote request costs tens of milliseconds whatever its size, so a sample-sized read
// per sample would stall the decode threads; one ranged download per shard (split into parallel chunks by
// the HttpEngine) is the largest coalescing of neighbouring samples there is, and the shard then serves
// all its samples from local memory. The loader's order decides which shards come next (a source sees
// each epoch's order through Source::will_read): a prefetcher walks the order from the epoch's start
// position and keeps up to `lookahead` shards fetched (or in flight) that no reader has touched yet, in
// the order readers will first need them, on `fetch_threads` threads separate from the decode threads.
// A reader that needs a shard before it is there fetches it itself (or waits for the fetch in flight:
// the cache's per-key lock); with the shard-window order (docs/ORDER.md) that happens at start-up only.
//
// A cache limit bounds local disk: a shard the cache evicts stays on disk while it is mapped, so with a
// limit L the mappings kept hold at most L/2 bytes and the prefetcher keeps at most L/4 bytes of shards
// ahead of the readers (each at least one shard). Disk use is then at most about 1.5 L (the cache's
// entries plus evicted shards still mapped); a shard evicted before its readers are done is fetched again.
//
// Faults: the HttpEngine retries resets, timeouts, truncated bodies, 5xx and 429 with backoff; a shard
// that still cannot be fetched is a kEnvironment error naming its URL, never a bad sample. That failure
// is remembered until the next plan() (the next epoch, or a resume): the shard's other samples, and the
// loader's own retries of environment failures, get it at once instead of each spending the engine's
// whole retry budget again (storage that is down raises after one budget, not one per sample). A fetched
// shard is checked against the index (its header: id, record count, size) before the cache admits it;
// every record's XXH3 is checked on read (PackedOptions::verify_checksums), so a damaged cache entry
// is found. A shard's ranges are all of one version of it (HttpEngine::download): one replaced while it
// downloads is read again from the start.
//
// Cancellation (chute/base/cancel.h): a reader's fetch watches the reader's CancelScope (the loader's
// epoch), and ends kCancelled, remembered as no failure of the shard; the prefetches watch this object's
// own token, cancelled by the destructor, so destroying it takes about 0.1 s whatever the server does.
//
// Thread-safety: every method may be called from many threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chute/base/cancel.h"
#include "chute/base/mapped_file.h"
#include "chute/io/packed_format.h"
#include "chute/order/sampler.h"
#include "chute/remote/object_store.h"
#include "chute/remote/shard_cache.h"

namespace chute {

struct RemoteStats {
  uint64_t shard_fetches = 0;  // shards this process downloaded (cache misses it filled)
  uint64_t cache_hits = 0;     // shard requests the cache served
  uint64_t reader_waits = 0;   // reads that found their shard not yet local (a stall on the network)
  double reader_wait_s = 0;    // the time those reads waited
};

class RemoteShards {
 public:
  struct Options {
    int lookahead = 16;     // shards fetched ahead of the readers (at least the order's window)
    int fetch_threads = 4;  // prefetch threads (each download is itself many ranged requests in flight)
    int max_mapped = 64;    // mappings kept open (least recently used closed first; a reader's copy lives on)
  };
  // `base_url`: the dataset's prefix (ending in '/'); `shards`: the index's shard list.
  static Result<std::shared_ptr<RemoteShards>> create(std::shared_ptr<ObjectStore> store,
                                                      std::shared_ptr<ShardCache> cache, std::string base_url,
                                                      std::vector<ShardInfo> shards, Options options);
  ~RemoteShards();
  RemoteShards(const RemoteShards&) = delete;
  RemoteShards& operator=(const RemoteShards&) = delete;

  // Shard `i`, local and mapped; blocks while it is fetched.
  Result<std::shared_ptr<const MappedFile>> get(uint32_t i) const;
  // The order readers will follow from position `start`: the prefetcher restarts from there. `shard_of`
  // maps a source index to its shard.
  void plan(EpochOrder order, int64_t start, std::function<uint32_t(int64_t)> shard_of);
  RemoteStats stats() const;
  std::string shard_url(uint32_t i) const;

 private:
  RemoteShards() = default;
  Result<std::shared_ptr<const MappedFile>> fetch(uint32_t i) const;  // through the cache
  void walk_loop();   // finds the next shards the order needs, in first-use order
  void fetch_loop();  // fetches what the walker queued
  void keep_mapped(uint32_t i, std::shared_ptr<const MappedFile> file) const;  // with mu_ held
  // The error readers get for a failed fetch of shard i.
  Status failure(uint32_t i, const Status& fetch_status) const;

  std::shared_ptr<ObjectStore> store_;
  std::shared_ptr<ShardCache> cache_;
  std::string base_url_;
  std::vector<ShardInfo> shards_;
  Options options_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  // Per shard: mapped (kept), touched by a reader since the plan, queued or in flight for the prefetcher.
  mutable std::vector<std::shared_ptr<const MappedFile>> mapped_;
  mutable std::vector<uint64_t> last_use_;  // a counter value per shard, for closing the least recent mapping
  mutable uint64_t use_clock_ = 0;
  mutable int mapped_count_ = 0;
  mutable uint64_t mapped_bytes_ = 0;
  uint64_t max_mapped_bytes_ = 0;  // 0: no limit (the cache has none)
  uint64_t max_ahead_bytes_ = 0;   // 0: no limit
  mutable std::vector<uint8_t> touched_;
  mutable std::unordered_map<uint32_t, Status> failed_;  // shards whose fetch failed since the plan
  std::vector<uint8_t> planned_;                         // queued for prefetch since the plan
  mutable int ahead_ = 0;                                // planned shards no reader has touched yet
  mutable uint64_t ahead_bytes_ = 0;                     // their bytes
  uint64_t generation_ = 0;                              // bumped by plan(): the walk restarts
  std::shared_ptr<const EpochOrder> order_;
  int64_t walk_ = 0;  // the walker's next position in order_
  std::function<uint32_t(int64_t)> shard_of_;
  std::vector<uint32_t> queue_;  // shards for the fetch threads, in first-use order
  size_t queue_head_ = 0;
  bool stop_ = false;
  const std::shared_ptr<CancelToken> prefetch_cancel_ = CancelToken::make();  // the fetch threads' scope
  mutable RemoteStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace chute
