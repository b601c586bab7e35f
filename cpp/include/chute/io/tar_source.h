// TarSource: plain tar files and WebDataset shards read in place, through one mapping per tar.
//
// Members become samples as scan_tar (chute/tar_scan.h) says: WebDataset groups, or one sample per image
// file for a tar of an image tree; links are read as their targets. A sample's label is the integer in
// its `.cls` member, or -1 when it has none.
// A plain tar of an ImageFolder tree (no `.cls` member in any of the tars) is labelled the ImageFolder way
// instead: below the directory all images share, the first directory is the class, classes sorted by
// name are labels 0..C-1 (when some image has no such directory, the samples stay unlabelled, -1).
//
// Index cache. Scanning a tar reads every member header, so the result is kept as an index (docs/FORMAT.md,
// kind tar): never in the dataset's directory unless asked. TarSource::open uses "<tar>.chidx" beside the
// tar when it exists and matches (write_tar_indexes wrote it: `chute index`), else
// "<cache_dir>/tar-index/<XXH3 of the tar's absolute path>.chidx" when it matches, else scans the tar and
// writes that cache file (best effort: a cache directory that cannot be written keeps the index in
// memory). An index matches its tar when the file's name, size, mtime, inode and ctime are the recorded
// ones and so is a content fingerprint (tar_fingerprint); anything else, a damaged index included, is
// rebuilt, never trusted.
// Thread-safety: immutable after open; every method may run on many threads.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chute/base/mapped_file.h"
#include "chute/io/packed_format.h"
#include "chute/io/source.h"
#include "chute/io/tar_scan.h"

namespace chute {

// The index bytes (docs/FORMAT.md, kind tar) for the tar `file` and its scan.
std::vector<uint8_t> encode_tar_index(const MappedFile& file, const TarScan& scan);

// XXH3-64 of the tar's first and last 64 KiB and of the member headers of up to 64 of its samples
// (evenly spaced; `offsets` are the samples' data offsets, each header the 512 bytes before one): a
// rewrite that keeps size and mtime still changes it.
uint64_t tar_fingerprint(std::span<const uint8_t> tar, const std::vector<uint64_t>& offsets);

struct TarOptions {
  // The cache directory (chute's Python layer passes $CHUTE_CACHE_DIR, else $XDG_CACHE_HOME/chute); ""
  // keeps scanned indexes in memory only.
  std::string cache_dir;
};

class TarSource final : public Source {
 public:
  // `paths`: tar files, in the order their samples are numbered.
  static Result<std::shared_ptr<TarSource>> open(const std::vector<std::string>& paths, TarOptions options = {});

  int64_t size() const override { return total_; }
  int64_t label(int64_t index) const override;
  // "<tar path>:<member>"
  std::string name(int64_t index) const override;
  std::string key(int64_t index) const override { return member(index); }
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;
  // One tar is one shard: its samples, in the order of `paths` (a tar's samples are numbered together).
  std::vector<int64_t> shard_sizes() const override;

  // The image member's path inside its tar.
  std::string member(int64_t index) const;
  size_t num_tars() const { return tars_.size(); }
  const std::string& tar_path(size_t t) const { return tars_[t].file->path(); }
  uint64_t payload_size(int64_t index) const;
  // Class names when the labels come from an ImageFolder layout; empty with `.cls` labels.
  const std::vector<std::string>& classes() const { return classes_; }
  // Members of every tar left out of the samples, by reason (examples are "<tar path>:<member>").
  const std::vector<TarSkipped>& skipped() const { return skipped_; }
  // The index file tar `t`'s index was read from or written to; "" when it is only in memory.
  const std::string& index_path(size_t t) const { return tars_[t].index_path; }

 private:
  struct Tar {
    std::shared_ptr<const MappedFile> file;
    std::shared_ptr<const void> index_owner;  // the bytes `index` reads
    IndexView index;
    std::string index_path;
    int64_t first = 0;
  };
  const Tar& locate(int64_t index, uint64_t* local) const;
  void label_by_folder();

  std::vector<Tar> tars_;
  int64_t total_ = 0;
  std::vector<std::string> classes_;
  std::vector<int64_t> folder_labels_;  // per sample, when labelled by folder
  std::vector<TarSkipped> skipped_;
};

// Builds "<tar>.chidx" beside each tar (rewriting a stale one): only when asked (`chute index`). Errors name
// the tar.
Status write_tar_indexes(const std::vector<std::string>& paths);

}  // namespace chute
