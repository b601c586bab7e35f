// FileList: samples given as (path, label) pairs, either in a text file, one "<path> <label>" per line (the
// label is the last whitespace-separated field, so paths may hold spaces; relative paths are relative to the
// list file's directory; blank lines and lines starting with '#' are skipped; a NUL byte anywhere in a line is
// an error naming the line, never a path cut short), or in memory (any bytes but NUL in a path, newlines and
// trailing spaces included).
// Thread-safety: immutable after construction; read() may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chute/io/source.h"

namespace chute {

class FileList final : public Source {
 public:
  static Result<std::shared_ptr<FileList>> open(const std::string& list_path);
  // The samples in memory: paths[i] with labels[i]; a relative path is relative to `root`. Errors name the
  // entry: different lengths, no sample, an empty path or one holding a NUL byte.
  static Result<std::shared_ptr<FileList>> from_entries(std::string root, std::vector<std::string> paths,
                                                        std::vector<int64_t> labels);

  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  std::string name(int64_t index) const override { return paths_[index]; }
  std::string key(int64_t index) const override { return path_below(root_, paths_[index]); }
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;

  // Where relative paths start: the list file's directory, or from_entries' root.
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
};

}  // namespace chute
