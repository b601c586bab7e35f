#include "chute/base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

namespace chute {
namespace {

Status errno_error(const std::string& what) { return io_error(what + ": " + std::strerror(errno)); }

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno_error("cannot write " + path);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

constexpr const char* kTmp = ".tmp-";

}  // namespace

std::string temporary_suffix() {
  std::random_device rd;
  return kTmp + std::to_string(::getpid()) + "-" + std::to_string(rd());
}

int temporary_name_pid(const std::string& name) {
  const size_t at = name.rfind(kTmp);
  if (at == std::string::npos) return 0;
  const char* p = name.c_str() + at + std::strlen(kTmp);
  char* end = nullptr;
  const long pid = std::strtol(p, &end, 10);
  if (end == p || *end != '-' || pid <= 0 || pid > (1L << 30)) return 0;
  for (const char* q = end + 1; *q; ++q)
    if (*q < '0' || *q > '9') return 0;
  return end[1] ? static_cast<int>(pid) : 0;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + temporary_suffix()) {}

Result<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::string& path) {
  auto f = std::unique_ptr<AtomicFile>(new AtomicFile(path));
  f->fd_ = ::open(f->tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd_ < 0) return errno_error("cannot create " + f->tmp_);
  f->buffer_.reserve(kBuffer);
  return f;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink((renamed_ ? path_ : tmp_).c_str());
}

Status AtomicFile::append(std::span<const uint8_t> bytes) {
  if (buffer_.size() + bytes.size() > kBuffer) CHUTE_RETURN_IF_ERROR(flush());
  if (bytes.size() >= kBuffer) {
    CHUTE_RETURN_IF_ERROR(write_all(fd_, bytes.data(), bytes.size(), tmp_));
  } else {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  }
  size_ += bytes.size();
  return Status::ok();
}

Status AtomicFile::write_at(uint64_t offset, std::span<const uint8_t> bytes) {
  CHUTE_RETURN_IF_ERROR(flush());
  if (::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset)) != static_cast<ssize_t>(bytes.size()))
    return errno_error("cannot write " + tmp_);
  return Status::ok();
}

Status AtomicFile::finish() {
  CHUTE_RETURN_IF_ERROR(flush());
  if (::fdatasync(fd_) != 0) return errno_error("cannot sync " + tmp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return errno_error("cannot close " + tmp_);
  return Status::ok();
}

Status AtomicFile::rename_into_place() {
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return errno_error("cannot rename " + tmp_);
  renamed_ = true;
  return Status::ok();
}

Status AtomicFile::flush() {
  CHUTE_RETURN_IF_ERROR(write_all(fd_, buffer_.data(), buffer_.size(), tmp_));
  buffer_.clear();
  start_writeback();
  return Status::ok();
}

// Starts (without waiting) the disk write of what was written since the last call, so that the sync at
// finish() waits for the tail only (like RocksDB's bytes_per_sync). Advisory: errors surface there.
void AtomicFile::start_writeback() {
  const uint64_t written = size_ - buffer_.size();
  if (written > synced_) {
    ::sync_file_range(fd_, static_cast<off_t>(synced_), static_cast<off_t>(written - synced_), SYNC_FILE_RANGE_WRITE);
    synced_ = written;
  }
}

Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  // A name of its own: ranks that open the same tar at once each write its index, and the last rename wins.
  CHUTE_ASSIGN_OR_RETURN(auto file, AtomicFile::create(path));
  CHUTE_RETURN_IF_ERROR(file->append(bytes));
  CHUTE_RETURN_IF_ERROR(file->finish());
  CHUTE_RETURN_IF_ERROR(file->rename_into_place());
  file->keep();
  return Status::ok();
}

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open " + dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::ok() : errno_error("cannot sync " + dir);
}

}  // namespace chute
