// TarSource: plain tar files and WebDataset shards, read in place (local tars, through one mapping per tar)
// or streamed (tars in object storage, through a ShardStream: io/shard_stream.h).
//
// Members become samples as scan_tar (chute/tar_scan.h) says: WebDataset groups, or one sample per image
// file for a tar of an image tree; links are read as their targets. A sample's label is the integer in
// its `.cls` member, or -1 when it has none.
// A plain tar of an ImageFolder tree (no `.cls` member in any of the tars) is labelled the ImageFolder way
// instead: below the directory all images share, the first directory is the class, classes sorted by
// name are labels 0..C-1 (when some image has no such directory, the samples stay unlabelled, -1).
//
// Every tar's samples are known at open, from its index, for local and remote tars alike: the dataset's
// size, the ranks' shares and the shard-window order (one tar, one shard) are then the same from a local
// copy and from the bucket (docs/REMOTE.md, "Tar shards").
//
// Index cache (local tars). Scanning a tar reads every member header, so the result is kept as an index
// (docs/FORMAT.md, kind tar): never in the dataset's directory unless asked. TarSource::open uses
// "<tar>.chidx" beside the tar when it exists and matches (write_tar_indexes wrote it: `chute index`), else
// "<cache_dir>/tar-index/<XXH3 of the tar's absolute path>.chidx" when it matches, else scans the tar and
// writes that cache file (best effort: a cache directory that cannot be written keeps the index in
// memory). An index matches its tar when the file's name, size, mtime, inode and ctime are the recorded
// ones and so is a content fingerprint (tar_fingerprint); anything else, a damaged index included, is
// rebuilt, never trusted. Remote tars: io/remote_tars.h.
// Thread-safety: immutable after open; every method may run on many threads.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chute/base/mapped_file.h"
#include "chute/io/index_cache.h"
#include "chute/io/packed_format.h"
#include "chute/io/shard_stream.h"
#include "chute/io/source.h"
#include "chute/io/tar_scan.h"

namespace chute {

// The index bytes (docs/FORMAT.md, kind tar) for the tar `file` and its scan.
std::vector<uint8_t> encode_tar_index(const IndexedFile& file, const TarScan& scan);

// XXH3-64 of the tar's first and last 64 KiB and of the member headers of up to 64 of its samples
// (evenly spaced; `offsets` are the samples' data offsets, each header the 512 bytes before one): a
// rewrite that keeps size and mtime still changes it.
uint64_t tar_fingerprint(std::span<const uint8_t> tar, const std::vector<uint64_t>& offsets);

struct TarOptions {
  // The cache directory (chute's Python layer passes $CHUTE_CACHE_DIR, else $XDG_CACHE_HOME/chute); ""
  // keeps scanned (and, for remote tars, learned) indexes in memory only.
  std::string cache_dir;
};

class TarSource final : public Source {
 public:
  // `paths`: tar files, in the order their samples are numbered.
  static Result<std::shared_ptr<TarSource>> open(const std::vector<std::string>& paths, TarOptions options = {});
  // Tar shards in object storage (`tars`, as ObjectStore::expand() found them), in the order their samples
  // are numbered. Opens without reading the tars when each has an index (remote_tars.h); the tars without
  // one are streamed once first (through the same stream, so that with a disk cache their bytes are kept)
  // and indexed. Samples are then read from the stream. `cache` null: CachePolicy::kNone (and indexes in
  // memory only: pass an empty options.cache_dir). An open still streaming tars ends kCancelled once the
  // calling thread's CancelScope is cancelled (chute/base/cancel.h). A tar replaced while it streams is
  // indexed in the version that arrived (ShardStream::version).
  static Result<std::shared_ptr<TarSource>> open_remote(std::vector<ObjectInfo> tars,
                                                        std::shared_ptr<ObjectStore> store,
                                                        std::shared_ptr<ShardCache> cache, TarOptions options,
                                                        ShardStream::Options stream);

  int64_t size() const override { return total_; }
  int64_t label(int64_t index) const override;
  // "<tar path>:<member>"
  std::string name(int64_t index) const override;
  std::string key(int64_t index) const override { return member(index); }
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;
  // One tar is one shard: its samples, in the order of `paths` (a tar's samples are numbered together).
  std::vector<int64_t> shard_sizes() const override;
  // Remote tars: the order's tars are fetched ahead of the readers, into memory the loader counts.
  void will_read(const EpochOrder& order, int64_t start) const override;
  SourceMemory memory_wanted(int64_t shard_window) const override;
  void set_memory(uint64_t bytes, int64_t shard_window) const override;
  // Null for local tars.
  const ShardStream* remote() const { return stream_.get(); }

  // The image member's path inside its tar.
  std::string member(int64_t index) const;
  size_t num_tars() const { return tars_.size(); }
  // A local tar's path, or a remote one's URL without credentials.
  const std::string& tar_path(size_t t) const { return tars_[t].name; }
  uint64_t payload_size(int64_t index) const;
  // Class names when the labels come from an ImageFolder layout; empty with `.cls` labels.
  const std::vector<std::string>& classes() const { return classes_; }
  // Members of every tar left out of the samples, by reason (examples are "<tar path>:<member>").
  const std::vector<TarSkipped>& skipped() const { return skipped_; }
  // The index file tar `t`'s index was read from or written to (a remote tar's sidecar: its URL); "" when
  // it is only in memory.
  const std::string& index_path(size_t t) const { return tars_[t].index_path; }

 private:
  struct Tar {
    std::string name;                         // the path, or the URL without credentials
    std::shared_ptr<const ShardBytes> file;   // a local tar's mapping; null for a remote one (streamed)
    std::shared_ptr<const void> index_owner;  // the bytes `index` reads
    IndexView index;
    std::string index_path;
    int64_t first = 0;
  };
  const Tar& locate(int64_t index, uint64_t* local) const;
  // Adds tar `t`'s index: its samples, and what its scan skipped.
  void add(Tar t);
  // The tars' samples counted, and labelled (label_by_folder); an error when there are none.
  Status finish(const std::string& first_name);
  void label_by_folder();
  Result<std::shared_ptr<const ShardBytes>> tar_bytes(const Tar& t, size_t i) const;

  std::vector<Tar> tars_;
  int64_t total_ = 0;
  std::vector<std::string> classes_;
  std::vector<int64_t> folder_labels_;  // per sample, when labelled by folder
  std::vector<TarSkipped> skipped_;
  std::shared_ptr<ShardStream> stream_;  // remote tars
};

// Builds "<tar>.chidx" beside each tar (rewriting a stale one): only when asked (`chute index`). Errors name
// the tar.
Status write_tar_indexes(const std::vector<std::string>& paths);

}  // namespace chute
