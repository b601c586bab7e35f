#include "base/detail/file_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "chute/base/cancel.h"
#include "chute/base/environment.h"

namespace chute::detail {
namespace {

constexpr int kPollMaxMs = 20;  // a cancellable wait's longest sleep between tries

// The descriptors of the locks this process holds, for the fork handler.
std::mutex g_held_mu;
std::vector<int> g_held;

void before_fork() { g_held_mu.lock(); }
void after_fork_in_parent() { g_held_mu.unlock(); }
// The child's copies of the held descriptors now name /dev/null: the parent's locks stay the parent's,
// and the numbers stay valid for the FileLocks that still hold them (their release() in the child, if the
// forking thread held one, then closes /dev/null and removes nothing).
void after_fork_in_child() {
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int fd : g_held) {
    if (null < 0 || ::dup3(null, fd, O_CLOEXEC) < 0) ::close(fd);
  }
  if (null >= 0) ::close(null);
  g_held.clear();
  g_held_mu.unlock();
}

void hold(int fd) {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard<std::mutex> lock(g_held_mu);
  g_held.push_back(fd);
}

void unhold(int fd) {
  std::lock_guard<std::mutex> lock(g_held_mu);
  g_held.erase(std::remove(g_held.begin(), g_held.end(), fd), g_held.end());
}

}  // namespace

FileLock::FileLock(int fd, std::string path) : fd_(fd), owner_(::getpid()), path_(std::move(path)) { hold(fd_); }

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      owner_(other.owner_),
      path_(std::move(other.path_)),
      remove_on_release_(std::exchange(other.remove_on_release_, false)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    owner_ = other.owner_;
    path_ = std::move(other.path_);
    remove_on_release_ = std::exchange(other.remove_on_release_, false);
  }
  return *this;
}

void FileLock::release() {
  if (fd_ < 0) return;
  if (::getpid() != owner_) {  // a forked child's copy (after_fork_in_child): not its lock to remove
    ::close(std::exchange(fd_, -1));
    return;
  }
  if (remove_on_release_) ::unlink(path_.c_str());
  unhold(fd_);   // before close: the number may be reused at once
  ::close(fd_);  // closing the last descriptor drops the flock
  fd_ = -1;
}

Result<FileLock> FileLock::acquire(const std::string& path, bool wait, bool* waited) {
  return lock(path, LOCK_EX, wait, waited);
}

Result<FileLock> FileLock::acquire_shared(const std::string& path) { return lock(path, LOCK_SH, false, nullptr); }

bool FileLock::try_upgrade() {
  if (fd_ < 0) return false;
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc == 0) return true;
  remove_on_release_ = false;  // not this holder's to remove
  release();
  return false;
}

namespace {
// Whether `path` still names the file open as `fd` (its holder has not removed it).
bool names_file(const std::string& path, int fd) {
  struct stat held, named;
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && named.st_ino == held.st_ino &&
         named.st_dev == held.st_dev;
}
}  // namespace

Result<FileLock> FileLock::lock(const std::string& path, int operation, bool wait, bool* waited) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "cannot open the lock file " + path);
    }
    FileLock lock(fd, path);  // closes it on every way out
    int rc;
    while ((rc = ::flock(fd, operation | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0 && errno == EWOULDBLOCK) {
      // Busy: unless its holder is removing the file (then the path's next file is free), wait or give up.
      if (!names_file(path, fd)) continue;
      if (!wait) return FileLock();
      if (waited != nullptr) *waited = true;
      if (CancelScope::current() == nullptr) {
        while ((rc = ::flock(fd, operation)) != 0 && errno == EINTR) {
        }
      } else {
        // A cancellable wait: flock() itself cannot watch a token, so try again every few milliseconds.
        for (int ms = 1; (rc = ::flock(fd, operation | LOCK_NB)) != 0 && (errno == EWOULDBLOCK || errno == EINTR);
             ms = std::min(ms * 2, kPollMaxMs)) {
          if (CancelScope::cancelled()) return cancelled_error("waiting for the lock " + path);
          ::usleep(static_cast<useconds_t>(ms) * 1000);
        }
      }
    }
    if (rc != 0 && (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS))
      return Status(StatusCode::kUnsupported, "cannot lock " + path + ": " + std::strerror(errno));
    if (rc != 0) return errno_status(errno, "cannot lock " + path);
    if (names_file(path, fd)) return lock;
    // Its holder removed the file before we locked it: lock the path's current file instead.
  }
}

}  // namespace chute::detail
