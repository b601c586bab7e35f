// TarSource: plain tar files and WebDataset shards read in place, through one mapping per tar.
//
// Members are grouped WebDataset's way: a member's key is its path up to the first dot of its file name
// and the rest is its extension; consecutive members with the same key make one sample. A sample's image
// is its first member with an image extension (jpg, jpeg, png, ppm, bmp, pgm, tif, tiff, webp); its label
// is the integer in its `.cls` member, or -1 when it has none. Groups without an image (a dataset's
// metadata.json, say) are not samples. Directories, links and other special members are skipped.
// A plain tar of an ImageFolder tree (no `.cls` member in any of the tars) is labelled the ImageFolder way
// instead: below the directory all images share, the first directory is the class, classes sorted by
// name are labels 0..C-1 (when some image has no such directory, the samples stay unlabelled, -1).
// The tar's index is kept beside it as "<tar>.chidx" (docs/FORMAT.md, kind tar), built on first open
// and rebuilt when the tar's size or mtime changes.
// Thread-safety: immutable after open; every method may run on many threads.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chute/mapped_file.h"
#include "chute/packed_format.h"
#include "chute/source.h"

namespace chute {

struct TarSample {
  uint64_t offset = 0;  // the image's bytes in the tar
  uint64_t size = 0;
  int64_t label = -1;
  std::string member;  // the image member's path in the tar
};

// Reads the member headers of a whole tar file (ustar, GNU long names, pax path and size) and groups them
// into samples. Every header is checked (checksum, sizes inside the file); `what` names the tar in errors.
Result<std::vector<TarSample>> scan_tar(std::span<const uint8_t> tar, const std::string& what);

// The index bytes (docs/FORMAT.md, kind tar) for the tar `file` and its scanned samples.
std::vector<uint8_t> encode_tar_index(const MappedFile& file, const std::vector<TarSample>& samples);

struct TarOptions {
  // Write "<tar>.chidx" when it is missing or stale. A failed write (a read-only directory) is not an
  // error: the index is then kept in memory.
  bool write_index = true;
};

class TarSource final : public Source {
 public:
  // `paths`: tar files, in the order their samples are numbered.
  static Result<std::shared_ptr<TarSource>> open(const std::vector<std::string>& paths, TarOptions options = {});

  int64_t size() const override { return total_; }
  int64_t label(int64_t index) const override;
  // "<tar path>:<member>"
  std::string name(int64_t index) const override;
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;

  // The image member's path inside its tar.
  std::string member(int64_t index) const;
  size_t num_tars() const { return tars_.size(); }
  const std::string& tar_path(size_t t) const { return tars_[t].file->path(); }
  uint64_t payload_size(int64_t index) const;
  // Class names when the labels come from an ImageFolder layout; empty with `.cls` labels.
  const std::vector<std::string>& classes() const { return classes_; }

 private:
  struct Tar {
    std::shared_ptr<const MappedFile> file;
    std::shared_ptr<const void> index_owner;  // the bytes `index` reads
    IndexView index;
    int64_t first = 0;
  };
  const Tar& locate(int64_t index, uint64_t* local) const;
  void label_by_folder();

  std::vector<Tar> tars_;
  int64_t total_ = 0;
  std::vector<std::string> classes_;
  std::vector<int64_t> folder_labels_;  // per sample, when labelled by folder
};

// Builds "<tar>.chidx" for each tar (rewriting a stale one); errors name the tar.
Status write_tar_indexes(const std::vector<std::string>& paths);

}  // namespace chute
