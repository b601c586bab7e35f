// MappedFile: a whole file mapped read-only (RAII around mmap/munmap), or an empty file's empty span.
//
// The mapping is taken once, at open; reads are then plain memory accesses with no system call. The
// file's size is fixed at open: a file truncated by someone else while mapped makes later reads of the
// lost pages fault (SIGBUS), as with any mmap reader, so chute never writes a file in place that it may
// have mapped (the writer renames new files over old ones instead).
// Thread-safety: immutable after open; bytes() may be read from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "chute/status.h"

namespace chute {

class MappedFile {
 public:
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  int64_t mtime_ns() const { return mtime_ns_; }
  // The file's inode and status-change time at open (keys of a cached index).
  uint64_t inode() const { return inode_; }
  int64_t ctime_ns() const { return ctime_ns_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int64_t mtime_ns_ = 0;
  uint64_t inode_ = 0;
  int64_t ctime_ns_ = 0;
};

}  // namespace chute
