// ShardCache: a node-local, on-disk cache of whole remote shards, shared by every process on the node
// (the ranks of one job) through one directory.
//
// Layout of the directory (flat; names never contain a dot before their suffix):
//   <name>.shard                an entry: the shard's bytes, complete and verified (mtime = last used)
//   <name>.key                  the entry's key, verbatim (for list())
//   <name>.lock                 the key's fill lock (flock); removed by its holder when the fill ends
//   <name>.<pid>-<rand>.tmp     a fill in progress (or left by a killed filler; swept), and its key's
//   .cache.lock                 the cache-wide lock: the set of entries changes only under it
//   .limit                      the limit_bytes of the last open() that set one (for `chute cache ls`)
// <name> is a readable tail of the key ([A-Za-z0-9_-], other characters as '_') and the XXH3-64 hex of
// the whole key. Keys appear in errors and in list(): a key must not hold credentials (a URL's signed
// query, say); a URL plus its ETag is the intended key (cache_key.h writes every key chute uses).
//
// Guarantees:
// - Never a torn entry: an entry appears only by rename() of a temp file that fill() wrote completely,
//   whose size was checked and that verify() accepted. A process killed mid-fill (even kill -9) leaves a
//   temp file only; flock() locks die with their process, so the next filler of that key (or clear(), or
//   the next open()) sweeps it.
// - One fill per key at a time, across threads and processes: the filler holds the key's flock; others
//   asking for that key wait on it (CacheStats::waits), then find the entry (a hit). A fork()ed child does
//   not inherit the locks its parent holds (detail/file_lock.h).
// - No fsync: entries are copies of remote data, and a process crash (kill -9) loses nothing the page
//   cache holds. After an OS crash or power loss an entry's data may be lost while its name survives;
//   the size check and verify() on every hit catch that, and the entry is refetched. Without a verify()
//   only the size is checked then. fsync would stall every fill by a write-back of the whole shard.
// - The limit: after an insert, evicting least-recently-used entries brings the total of entries to
//   <= limit_bytes, except that the entry just inserted is never evicted: one entry larger than the limit
//   is kept, alone. An evicted entry that a reader still has mapped stays readable through its mapping.
//   Hits (and peek()) update an entry's last-used time (its mtime); LRU is by that time.
// Thread-safety: all methods may be called from any thread; processes coordinate through the directory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chute/base/mapped_file.h"
#include "chute/base/status.h"

namespace chute {

struct CacheOptions {
  std::string dir;
  uint64_t limit_bytes = 0;  // 0: no limit
};

struct CacheEntry {
  std::string key;  // empty when its .key file is missing (an entry of an older or foreign writer)
  std::string path;
  uint64_t size = 0;
  int64_t last_used_ns = 0;
};

// This process's counters (this ShardCache object's, summed over its threads).
struct CacheStats {
  uint64_t hits = 0, misses = 0, evictions = 0, bytes_fetched = 0, waits = 0;
};

class ShardCache {
 public:
  // Creates `dir` (and its parents); kIoError naming it when it cannot be created or written.
  // Sweeps temp files left by killed fillers.
  static Result<std::shared_ptr<ShardCache>> open(CacheOptions options);

  // Writes exactly `size` bytes into `fd` (a new empty file, opened for writing).
  using Fill = std::function<Status(int fd)>;
  // The format's check of a whole entry; an error makes the entry unusable.
  using Verify = std::function<Status(const MappedFile& file)>;

  // The entry for `key` (`size` bytes), mapped read-only. A hit: an entry of that size that verify()
  // accepts (an empty verify accepts everything). Otherwise (a miss, or a bad entry, which is removed)
  // this caller takes the key's lock, fills a temp file, checks its size and verify(), renames it into
  // place and evicts down to the limit. A fill or verify error names the key and leaves nothing behind.
  // Blocks while another thread or process fills the same key (as long as its fill takes).
  Result<std::shared_ptr<const MappedFile>> get(const std::string& key, uint64_t size, const Fill& fill,
                                                const Verify& verify);
  // The entry if present and of that size (not verified, never filled); nullptr when absent. Updates its
  // last-used time; counts neither a hit nor a miss.
  Result<std::shared_ptr<const MappedFile>> peek(const std::string& key, uint64_t size);

  // The entries, most recently used first.
  std::vector<CacheEntry> list() const;
  // Removes every entry and stale temp file except those of keys being filled right now.
  Status clear();
  // The total size of the entries.
  uint64_t bytes() const;
  CacheStats stats() const;

  const CacheOptions& options() const { return options_; }
  // The limit recorded in `dir` by the last open() with a non-zero limit_bytes; 0 when none.
  static uint64_t recorded_limit(const std::string& dir);
  // The entry's path for `key` (whether or not it exists).
  std::string entry_path(const std::string& key) const;

 private:
  explicit ShardCache(CacheOptions options) : options_(std::move(options)) {}
  struct Names;  // a key's file names
  static Names names_for(const std::string& dir, const std::string& key);
  // Fills, verifies and renames into place; the caller holds the key's lock.
  Result<std::shared_ptr<const MappedFile>> fill_locked(const Names& names, const std::string& key, uint64_t size,
                                                        const Fill& fill, const Verify& verify);
  // Under the cache-wide lock: evicts LRU entries (never `keep`) until the total is <= the limit.
  void evict_locked(const std::string& keep);
  // Removes the temp files of entry `name`; the caller holds its key's lock.
  void remove_temps(const std::string& name) const;
  // Removes the temp files of every key whose lock is free (their fillers died).
  void sweep_stale_temps() const;

  CacheOptions options_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, evictions_{0}, bytes_fetched_{0}, waits_{0};
};

}  // namespace chute
