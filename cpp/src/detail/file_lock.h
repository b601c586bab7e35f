// FileLock: an exclusive flock() on a lock file, RAII. Shared by threads (each lock opens its own file
// description, so two threads of one process exclude each other) and processes (the kernel drops the lock
// when its holder dies, kill -9 included).
//
// A lock file may be removed, but only by its holder (remove()); an acquirer that locked a file which was
// removed meanwhile sees that the path no longer names the inode it locked, and starts again on the new
// file. Hence no two holders ever believe they hold the same path's lock.
// Thread-safety: one FileLock per holder; not shared.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "chute/environment.h"
#include "chute/status.h"

namespace chute::detail {

class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        path_(std::move(other.path_)),
        remove_on_release_(std::exchange(other.remove_on_release_, false)) {}
  FileLock& operator=(FileLock&& other) noexcept {
    if (this != &other) {
      release();
      fd_ = std::exchange(other.fd_, -1);
      path_ = std::move(other.path_);
      remove_on_release_ = std::exchange(other.remove_on_release_, false);
    }
    return *this;
  }
  ~FileLock() { release(); }

  // Locks `path` (created if absent). wait=false: returns an unheld FileLock when someone holds it.
  // `waited` (optional) is set when the lock was busy at first and this call then waited for it.
  static Result<FileLock> acquire(const std::string& path, bool wait, bool* waited = nullptr) {
    for (;;) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return errno_status(errno, "cannot open the lock file " + path);
      }
      FileLock lock(fd, path);
      int rc;
      while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
      }
      if (rc != 0 && errno == EWOULDBLOCK) {
        if (!wait) return FileLock();
        if (waited != nullptr) *waited = true;
        while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {  // a signal: keep waiting
        }
      }
      if (rc != 0) return errno_status(errno, "cannot lock " + path);
      struct stat held, named;
      if (::fstat(fd, &held) != 0) return errno_status(errno, "cannot stat the lock file " + path);
      if (::stat(path.c_str(), &named) == 0 && named.st_ino == held.st_ino && named.st_dev == held.st_dev) return lock;
      // Its holder removed the file before we locked it: lock the path's current file instead.
    }
  }

  bool held() const { return fd_ >= 0; }
  // Unlinks the lock file, then releases it (only the holder may remove it).
  void remove() {
    remove_on_release_ = true;
    release();
  }
  // Makes the release (explicit, or by the destructor, an exception's included) remove the lock file.
  void remove_on_release() { remove_on_release_ = true; }

 private:
  FileLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void release() {
    if (fd_ < 0) return;
    if (remove_on_release_) ::unlink(path_.c_str());
    ::close(fd_);  // closing the last descriptor drops the flock
    fd_ = -1;
  }
  int fd_ = -1;
  std::string path_;
  bool remove_on_release_ = false;
};

}  // namespace chute::detail
