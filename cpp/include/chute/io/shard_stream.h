// ShardStream: the shards of a dataset in object storage (a packed dataset's shards, tar files) streamed
// through memory: each shard received whole into a buffer of a bounded pool of reused buffers (HttpEngine
// receives every range in place), decoded straight from there, and fetched ahead of the loader's order.
// The node's disk cache is a policy (CachePolicy): with kDisk a received shard is written to it after its
// readers have it (O_DIRECT, by the fetching thread), and a shard found there is read back into a buffer the
// same way; with kNone nothing touches the disk. docs/REMOTE.md, "The cold epoch", says why: a byte must pass
// through memory, not land in a newly allocated page.
//
// Why whole shards: a remote request costs tens of milliseconds whatever its size, so a sample-sized read
// per sample would stall the decode threads; one shard received by parallel ranged GETs is the largest
// coalescing of neighbouring samples there is. The loader's order decides which shards come next (a source
// sees each epoch's order through Source::will_read): a walker reads the order from the epoch's start
// position and queues shards in the order readers will first need them, so the first window is fetched
// before any lookahead; `fetch_threads` threads (apart from the decode threads) fetch what it queued. A
// reader that needs a shard before it is there fetches it itself (or waits for the fetch in flight).
//
// Memory: the pool holds at most memory_limit() bytes of buffers, each of the largest shard's size. A
// loader sets that limit from its max_memory (Source::set_memory): enough for the shards readers use at
// once (two windows of the shard-window order) and a window ahead. A buffer is reused for another shard
// once no reader holds its shard: the prefetcher takes one back from the least recently used shard readers
// have touched, never from one queued ahead; a reader takes one back from any shard but its own. The walker
// keeps at most (buffers - 2 windows) shards, and at least one, fetched ahead of the readers.
//
// Checks: every shard received from storage is checked by the source's `check` (a packed shard's header
// against the index, a tar against its index's fingerprint) before anyone reads it or the cache keeps it;
// a shard read back from the cache is checked against the checksum its entry carries (shard_cache.h).
//
// Faults: the HttpEngine retries resets, timeouts, truncated bodies, 5xx and 429 with backoff; a shard that
// still cannot be fetched is a kEnvironment error naming its URL, never a bad sample. That failure is
// remembered until the next plan() (the next epoch, or a resume): the shard's other samples, and the
// loader's own retries of environment failures, get it at once instead of each spending the engine's whole
// retry budget again.
//
// One version: every shard is received in one version of its object (object_fetch.h); a tar replaced
// while it arrives is stat()ed again and fetched under its new version's key, which version() then gives.
//
// Cancellation (chute/base/cancel.h): a reader's fetch, and its wait for another's, watch the reader's
// CancelScope (the loader's epoch, a Ctrl-C'd call) and end kCancelled within ~0.1 s, remembered as no
// failure of the shard; the prefetches watch this stream's own token, cancelled by the destructor, so
// destroying it takes about 0.1 s whatever the server does.
//
// Thread-safety: every method may be called from many threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chute/base/buffer_pool.h"
#include "chute/base/cancel.h"
#include "chute/io/shard_bytes.h"
#include "chute/io/source.h"
#include "chute/order/sampler.h"
#include "chute/remote/object_fetch.h"
#include "chute/remote/object_store.h"
#include "chute/remote/shard_cache.h"

namespace chute {

// Where a remote dataset's shards are kept between their uses (chute.open(..., cache=)).
enum class CachePolicy {
  kNone,  // memory only: every epoch receives its shards again; nothing is written to disk
  kDisk,  // the node's disk cache too (ShardCache): later epochs, and other ranks of the node, read it there
};
const char* cache_policy_name(CachePolicy policy);  // "none", "disk"
Result<CachePolicy> parse_cache_policy(std::string_view name);

struct RemoteStats {
  uint64_t shard_fetches = 0;   // shards received from storage by this process
  uint64_t cache_hits = 0;      // shards read back from the disk cache
  uint64_t reader_waits = 0;    // reads that found their shard not in memory (a stall on the network or disk)
  double reader_wait_s = 0;     // the time those reads waited
  uint64_t bytes_received = 0;  // bytes of the shards received from storage
  int buffers = 0;              // the pool's buffers now (each buffer_bytes)
  uint64_t memory_limit = 0;    // the pool's limit in bytes
  uint64_t damaged = 0;         // disk cache entries that failed their checksum (removed, fetched again)
};

// One shard of the stream: the object, and its key in the disk cache (cache_key.h).
struct StreamedShard {
  ObjectInfo object;
  std::string key;
};

class ShardStream {
 public:
  struct Options {
    int fetch_threads = 8;  // shards fetched at once ahead of the readers (each by many ranged requests)
    uint64_t memory_bytes = uint64_t{256} << 20;  // the pool's limit until set_memory_limit() (at least one shard)
  };
  // A shard's bytes as received from storage, checked (against the source's index); empty: no check.
  using Check = std::function<Status(uint32_t shard, std::span<const uint8_t> bytes)>;
  // `cache` null: CachePolicy::kNone.
  static Result<std::shared_ptr<ShardStream>> create(std::shared_ptr<ObjectStore> store,
                                                     std::shared_ptr<ShardCache> cache,
                                                     std::vector<StreamedShard> shards, Check check, Options options);
  ~ShardStream();  // stops fetching; joins its threads once their fetches in flight end
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;

  // Shard `i`, in memory; blocks while it is fetched.
  Result<std::shared_ptr<const ShardBytes>> get(uint32_t i) const;
  // The order readers will follow from position `start`: the walker restarts from there. `shard_of` maps
  // a source index to its shard.
  void plan(EpochOrder order, int64_t start, std::function<uint32_t(int64_t)> shard_of);
  // Shards readers will want, in this order, before any order is planned (a source's own pass over them).
  void plan_shards(std::vector<uint32_t> shards);

  // The memory one shard takes (a buffer: the largest shard, in whole pages).
  uint64_t buffer_bytes() const { return pool_->buffer_bytes(); }
  // Buffers the pool may hold: max(1, bytes / buffer_bytes()). `working_shards`: how many shards readers
  // use at once (two windows of the shard-window order), which the walker keeps out of its lookahead.
  void set_memory_limit(uint64_t bytes, int working_shards) const;
  uint64_t memory_limit() const;
  // What a source streaming these shards tells a loader (Source::memory_wanted / set_memory): at least two
  // windows of shards (the shard-window order reads one and starts the next), and a window ahead; the
  // whole dataset for the sample order (`shard_window` 0), which reads every shard at once, at least one.
  SourceMemory memory_wanted(int64_t shard_window) const;
  void set_memory(uint64_t bytes, int64_t shard_window) const;
  size_t size() const { return shards_.size(); }
  const StreamedShard& shard(uint32_t i) const { return shards_[i]; }
  // The version of shard i's object last received (or read from the cache); shard(i).object until then.
  ObjectInfo version(uint32_t i) const;
  CachePolicy cache_policy() const { return cache_ ? CachePolicy::kDisk : CachePolicy::kNone; }
  RemoteStats stats() const;

 private:
  ShardStream() = default;
  // A buffer for a fetch of shard `for_shard` (mu_ held through `lock`): a free one, or one taken back from
  // a resident shard (see above); waits while none can be. nullptr once stopping.
  std::shared_ptr<PageBuffer> take_buffer(std::unique_lock<std::mutex>& lock, uint32_t for_shard, bool reader) const;
  // Fetches shard i into `buffer` (mu_ not held); publishes it to readers as soon as its bytes are good.
  Status fetch(uint32_t i, const std::shared_ptr<PageBuffer>& buffer) const;
  void publish(uint32_t i, const std::shared_ptr<PageBuffer>& buffer, FetchedFrom from,
               const ObjectInfo& version) const;
  int ahead_limit() const;  // with mu_ held
  void walk_loop();
  void fetch_loop();
  // The error readers get for a failed fetch of shard i.
  Status failure(uint32_t i, const Status& fetch_status) const;

  std::shared_ptr<ObjectStore> store_;
  std::shared_ptr<ShardCache> cache_;
  std::vector<StreamedShard> shards_;
  Check check_;
  Options options_;
  std::shared_ptr<BufferPool> pool_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  // Per shard: in memory, being fetched, touched by a reader since the plan, queued for the fetch threads.
  mutable std::vector<std::shared_ptr<const ShardBytes>> resident_;
  mutable std::vector<uint8_t> fetching_;
  mutable std::vector<ObjectInfo> versions_;  // per shard, the version received (see version())
  mutable std::vector<uint64_t> last_use_;    // a counter value per shard, for taking back the least recent
  mutable uint64_t use_clock_ = 0;
  mutable std::vector<uint8_t> touched_;
  mutable std::unordered_map<uint32_t, Status> failed_;  // shards whose fetch failed since the plan
  std::vector<uint8_t> planned_;                         // queued for prefetch since the plan
  mutable int ahead_ = 0;                                // planned shards no reader has touched yet
  mutable int working_ = 1;                              // shards readers use at once (set_memory_limit)
  uint64_t generation_ = 0;                              // bumped by plan(): the walk restarts
  std::shared_ptr<const EpochOrder> order_;
  std::vector<uint32_t> explicit_;  // plan_shards()'s list, walked when there is no order
  int64_t walk_ = 0;                // the walker's next position
  std::function<uint32_t(int64_t)> shard_of_;
  std::vector<uint32_t> queue_;  // shards for the fetch threads, in first-use order
  size_t queue_head_ = 0;
  bool stop_ = false;
  const std::shared_ptr<CancelToken> prefetch_cancel_ = CancelToken::make();  // the fetch threads' scope
  mutable RemoteStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace chute
