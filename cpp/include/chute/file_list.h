// FileList: samples listed in a text file, one "<path> <label>" per line (the label is the last
// whitespace-separated field, so paths may hold spaces). Relative paths are relative to the list file's
// directory. Blank lines and lines starting with '#' are skipped.
// Thread-safety: immutable after construction; read() may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chute/source.h"

namespace chute {

class FileList final : public Source {
 public:
  static Result<std::shared_ptr<FileList>> open(const std::string& list_path);

  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  std::string name(int64_t index) const override { return paths_[index]; }
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;

  // The list file's directory: relative paths start there.
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
};

}  // namespace chute
