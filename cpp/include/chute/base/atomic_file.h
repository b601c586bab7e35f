// Files that appear whole or not at all: written under a temporary name beside their destination, synced,
// then renamed into place. Used by `chute pack` (shards, indexes) and by the sources that cache an index
// beside the data (tar indexes).
// Thread-safety: an AtomicFile is used by one thread at a time; the free functions are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chute/base/status.h"

namespace chute {

// The temporary-name suffix of one attempt: ".tmp-<pid>-<random>". Two attempts at the same file (a retried
// Ray task while the first still runs on a partitioned node) never write into one file; the last rename wins.
std::string temporary_suffix();

// The process id in a name carrying temporary_suffix() ("<name>.tmp-<pid>-<n>"), or 0 when it carries none.
int temporary_name_pid(const std::string& name);

// A file written under "<path><temporary_suffix()>" and renamed to <path>; the temporary (or, once renamed
// but not kept, the renamed file) is removed on destruction unless keep() is called.
class AtomicFile {
 public:
  static Result<std::unique_ptr<AtomicFile>> create(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  Status append(std::span<const uint8_t> bytes);
  Status write_at(uint64_t offset, std::span<const uint8_t> bytes);
  // Flushes, syncs and closes the file, still under its temporary name.
  Status finish();
  Status rename_into_place();
  void keep() { committed_ = true; }

 private:
  static constexpr size_t kBuffer = size_t{4} << 20;
  explicit AtomicFile(std::string path);
  Status flush();
  void start_writeback();

  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t synced_ = 0;  // bytes whose writeback has been started
  std::vector<uint8_t> buffer_;
  bool renamed_ = false, committed_ = false;
};

// Writes `bytes` to `path` under a temporary name, syncs it and renames it into place.
Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

// fsync() of a directory, so that the renames into it are durable.
Status sync_directory(const std::string& dir);

}  // namespace chute
