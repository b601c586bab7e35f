// ShardCache: a node-local, on-disk cache of whole remote objects (shards, tars, indexes), shared by every process on
// the node (the ranks of one job) through one directory.
//
// Layout of the directory (flat; names never contain a dot before their suffix):
//   <name>.shard                an entry: the object's bytes and a 16-byte trailer ("chute-x3" and the XXH3-64
//                               of the bytes, little-endian); complete and checked (mtime = last used)
//   <name>.key                  the entry's key, verbatim (for list())
//   <name>.lock                 the key's fill lock (flock); removed by its holder when the fill ends
//   <name>.<pid>-<rand>.tmp     a fill in progress (or left by a killed filler; swept), and its key's
//   .cache.lock                 the cache-wide lock: the set of entries changes only under it
//   .limit                      the limit_bytes of the last open() that set one (for `chute cache ls`)
// <name> is a readable tail of the key ([A-Za-z0-9_-], other characters as '_') and the XXH3-64 hex of
// the whole key. Keys appear in errors and in list(): a key must not hold credentials (a URL's signed
// query, say); cache_key.h writes every key chute uses.
//
// Entries move between the caller's memory and the disk around the page cache (base/direct_file.h:
// O_DIRECT where the file system allows): a fill writes from the buffer the object was received into,
// a hit reads into the caller's buffer, and neither allocates a page-cache page per byte (docs/REMOTE.md,
// "The cold epoch"). Nothing is mapped: a reader holds its own copy in memory.
//
// Guarantees:
// - Never a torn entry: an entry appears only by rename() of a temp file that fill() wrote completely.
//   A process killed mid-fill (even kill -9) leaves a temp file only; flock() locks die with their
//   process, so the next filler of that key (or clear(), or the next open()) sweeps it.
// - Every hit is checked: the bytes read must have the checksum their trailer records. An entry damaged
//   on disk (a flipped bit, a file rewritten in place) is never served: it is removed, the damage is
//   reported (a line on stderr naming the entry and its key, and CacheStats::damaged), and the object is
//   filled again. An entry of another size (or without a trailer: an older chute's) is filled again.
// - One fill per key at a time, across threads and processes: the filler holds the key's flock; others
//   asking for that key wait on it (CacheStats::waits), then find the entry (a hit). A fork()ed child does
//   not inherit the locks its parent holds (detail/file_lock.h).
// - No fsync: entries are copies of remote data. After an OS crash or power loss an entry's data may be
//   lost while its name survives; the checksum catches that, and the entry is filled again.
// - The limit: after an insert, evicting least-recently-used entries brings the total of entries (their
//   files' sizes) to <= limit_bytes, except that the entry just inserted is never evicted: one entry larger
//   than the limit is kept, alone. Hits update an entry's last-used time (its mtime); LRU is by that time.
// - A fill whose entry cannot be written (a full disk) still serves its bytes: the object is not cached,
//   and a line on stderr says why (once per cache object; CacheStats::write_errors counts them).
// Thread-safety: all methods may be called from any thread; processes coordinate through the directory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chute/base/status.h"

namespace chute {

struct CacheOptions {
  std::string dir;
  uint64_t limit_bytes = 0;  // 0: no limit
};

struct CacheEntry {
  std::string key;  // empty when its .key file is missing (an entry of an older or foreign writer)
  std::string path;
  uint64_t size = 0;  // the file's: the object's bytes and the trailer
  int64_t last_used_ns = 0;
};

// This process's counters (this ShardCache object's, summed over its threads).
struct CacheStats {
  uint64_t hits = 0, misses = 0, evictions = 0, bytes_fetched = 0, waits = 0;
  uint64_t damaged = 0;       // entries that failed their checksum (removed and filled again)
  uint64_t write_errors = 0;  // fills whose entry could not be written (their bytes were still served)
};

class ShardCache {
 public:
  // Creates `dir` (and its parents); kIoError naming it when it cannot be created or written.
  // Sweeps temp files left by killed fillers.
  static Result<std::shared_ptr<ShardCache>> open(CacheOptions options);

  // Writes the object's bytes into all of `dst` (a miss); an error leaves no entry.
  using Fill = std::function<Status(std::span<uint8_t> dst)>;
  enum class Got { kHit, kFilled };
  // The object for `key` in `dst` (dst.size() bytes: the object's size; page-aligned memory, a PageBuffer's,
  // for O_DIRECT). A hit: the entry's bytes, checked. Otherwise this caller takes the key's lock (waiting
  // while another thread or process fills it), looks again, and else calls fill(dst), then ready() (the
  // bytes may be used from then on: the caller's readers need not wait for the disk), then writes the
  // entry and evicts down to the limit. A fill error names the key and leaves nothing behind.
  Result<Got> get(const std::string& key, std::span<uint8_t> dst, const Fill& fill,
                  const std::function<void()>& ready = {});

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
  // Bytes an entry of an object of `size` bytes takes on disk (its trailer included).
  static uint64_t entry_bytes(uint64_t size);

 private:
  explicit ShardCache(CacheOptions options) : options_(std::move(options)) {}
  struct Names;  // a key's file names
  static Names names_for(const std::string& dir, const std::string& key);
  // The entry read into dst: true when present, of that size and checked; kCorruptData when it fails
  // its checksum.
  Result<bool> load(const Names& names, std::span<uint8_t> dst) const;
  // Removes a damaged entry (under the cache-wide lock) and says so; the caller holds the key's lock.
  Status drop_damaged(const Names& names, const std::string& key, const Status& why);
  // Fills, writes and renames into place; the caller holds the key's lock.
  Status fill_locked(const Names& names, const std::string& key, std::span<uint8_t> dst, const Fill& fill,
                     const std::function<void()>& ready);
  // Writes the entry for dst's bytes (temp files renamed into place) and evicts.
  Status write_entry(const Names& names, const std::string& key, std::span<const uint8_t> bytes);
  // Under the cache-wide lock: evicts LRU entries (never `keep`) until the total is <= the limit.
  void evict_locked(const std::string& keep);
  // Removes the temp files of entry `name`; the caller holds its key's lock.
  void remove_temps(const std::string& name) const;
  // Removes the temp files of every key whose lock is free (their fillers died).
  void sweep_stale_temps() const;

  CacheOptions options_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, evictions_{0}, bytes_fetched_{0}, waits_{0}, damaged_{0},
      write_errors_{0};
};

}  // namespace chute
