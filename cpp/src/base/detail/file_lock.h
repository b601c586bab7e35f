// FileLock: an exclusive or shared flock() on a lock file, RAII. Shared by threads (each lock opens its own file
// description, so two threads of one process exclude each other) and processes (the kernel drops the lock
// when its holder dies, kill -9 included).
//
// A lock file may be removed, but only by an exclusive holder (remove()); an acquirer that locked a file which was
// removed meanwhile sees that the path no longer names the inode it locked, and starts again on the new
// file. Hence no two holders ever believe they hold the same path's lock.
//
// fork(): a flock belongs to the open file description, which a child shares with its parent; a child
// that outlived the parent's fill would keep the key locked, and every waiter on the node would hang. So a
// pthread_atfork handler closes, in the child, the descriptors of the locks this process holds.
// Thread-safety: one FileLock per holder; not shared.
#pragma once

#include <sys/types.h>

#include <string>

#include "chute/base/status.h"

namespace chute::detail {

class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  ~FileLock() { release(); }

  // Locks `path` (created if absent). wait=false: returns an unheld FileLock when someone holds it.
  // kUnsupported where the filesystem has no locks (ENOLCK, EOPNOTSUPP).
  // `waited` (optional) is set when the lock was busy at first and this call then waited for it (a signal
  // does not end the wait). A thread in a CancelScope (cancel.h) stops waiting once its token is
  // cancelled: kCancelled naming the path.
  static Result<FileLock> acquire(const std::string& path, bool wait, bool* waited = nullptr);
  // A shared lock on `path` (created if absent), beside other shared holders; without waiting: an unheld
  // FileLock when an exclusive holder has it.
  static Result<FileLock> acquire_shared(const std::string& path);
  // Converts a shared lock to an exclusive one without waiting. false when another holder has it: this
  // lock is then released (flock() converts by unlocking first, so it may already have been lost).
  bool try_upgrade();

  bool held() const { return fd_ >= 0; }
  // Unlinks the lock file, then releases it (only an exclusive holder may remove it).
  void remove() {
    remove_on_release_ = true;
    release();
  }
  // Makes the release (explicit, or by the destructor, an exception's included) remove the lock file.
  void remove_on_release() { remove_on_release_ = true; }

 private:
  FileLock(int fd, std::string path);
  static Result<FileLock> lock(const std::string& path, int operation, bool wait, bool* waited);
  void release();
  int fd_ = -1;
  pid_t owner_ = 0;  // the process that locked it
  std::string path_;
  bool remove_on_release_ = false;
};

}  // namespace chute::detail
