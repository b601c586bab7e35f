// Source: where samples come from. A source knows how many samples it has, each one's label and a name
// for error messages (its path), and reads a sample's encoded bytes on request.
//
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chute/base/status.h"

namespace chute {

class EpochOrder;

// Memory a source keeps for its own reads (a remote dataset's shards, received into memory:
// io/shard_stream.h), in bytes: what it needs at least to serve its readers, and what it would use.
struct SourceMemory {
  uint64_t least = 0;
  uint64_t wanted = 0;
};

// The largest sample file read by default (max_file_bytes): like max_pixels, a guard against a file that
// would exhaust memory when read whole.
inline constexpr uint64_t kDefaultMaxFileBytes = uint64_t{1} << 30;
// The error for a sample of `size` bytes over `max_bytes` (kResourceExhausted: a data error, skippable).
Status file_too_large(uint64_t size, uint64_t max_bytes);

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  virtual int64_t label(int64_t index) const = 0;
  // The sample's path or key, for error messages and inspection.
  virtual std::string name(int64_t index) const = 0;
  // The key a packed record stores for the sample (`chute pack`): what names it inside the dataset,
  // wherever the dataset lies. A file's path relative to the source's root (an image tree, a file list),
  // a tar member's path; by default name() (a packed dataset's stored key).
  virtual std::string key(int64_t index) const { return name(index); }
  // Replaces `out` with the sample's encoded bytes. `out` is reused across calls to avoid allocation.
  virtual Status read(int64_t index, std::vector<uint8_t>& out) const = 0;
  // Like read(), but a sample of more than `max_bytes` bytes is a kResourceExhausted error. Sources that
  // know a sample's size before reading it override this to fail before allocating; the default reads,
  // then checks.
  virtual Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const;
  // Samples per shard, in index order, when the source is stored as shards that are contiguous index
  // ranges (shard 0 holds [0, sizes[0]), shard 1 the next sizes[1], ...): what the shard-window order
  // (sampler.h) reads. Empty: no shards (an image tree, a file list).
  virtual std::vector<int64_t> shard_sizes() const { return {}; }
  // The order the loader will read from position `start` of an epoch on (each start_epoch): a source whose
  // reads are slow to start (remote shards) fetches ahead of it. The default does nothing.
  virtual void will_read(const EpochOrder& order, int64_t start) const {
    (void)order;
    (void)start;
  }
  // The memory the source keeps to read `shard_window` shards at a time (the shard-window order; 0: the
  // sample order). A loader counts it in its max_memory: it gives the source a share (set_memory) at
  // create(), between `least` and `wanted`, and its batch buffers and decodes the rest. Default: none.
  virtual SourceMemory memory_wanted(int64_t shard_window) const {
    (void)shard_window;
    return {};
  }
  // The bytes the source may keep from now on (the last loader to say so wins).
  virtual void set_memory(uint64_t bytes, int64_t shard_window) const {
    (void)bytes;
    (void)shard_window;
  }
};

// The source's class name for messages: "ImageFolder", "PackedSource", "TarSource", ...
std::string source_kind(const Source& source);
// `path` relative to the directory `root` when it lies below it, else `path` unchanged: a file's key.
std::string path_below(const std::string& root, const std::string& path);

}  // namespace chute
