#include "chute/base/environment.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace chute {

bool is_environment_errno(int err) {
  switch (err) {
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case EINTR:
    case EIO:
    case ENOBUFS:
    case ETIMEDOUT:
    case ESTALE:
      return true;
    default:
      return false;
  }
}

std::string environment_hint(int err) {
  switch (err) {
    case EMFILE:
      return "the per-process limit on open files (raise it with `ulimit -n`, RLIMIT_NOFILE)";
    case ENFILE:
      return "the system-wide limit on open files (fs.file-max, `sysctl fs.file-max`)";
    case ENOMEM:
      return "the memory available to this process (`ulimit -v`, the container's or cgroup's memory.max); "
             "lower max_memory, num_threads or max_pixels";
    case EAGAIN:
      return "a kernel resource that is temporarily exhausted (for threads: the process limit `ulimit -u`, the "
             "cgroup's pids.max, or the address space for their stacks, `ulimit -v`)";
    case EINTR:
      return "a system call interrupted by signals that kept coming";
    case EIO:
      return "the storage device or network mount failing to read (check `dmesg`); it did not pass";
    case ENOBUFS:
      return "kernel buffer space";
    case ETIMEDOUT:
      return "a network mount that timed out";
    case ESTALE:
      return "a network mount whose file handle went stale";
    default:
      return "";
  }
}

Status errno_status(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  if (is_environment_errno(err)) {
    return Status(StatusCode::kEnvironment,
                  msg + " (this is " + environment_hint(err) + ", not a fault of the sample)");
  }
  return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError, std::move(msg));
}

Status out_of_memory(const std::string& what, size_t bytes) {
  std::string msg = "out of memory " + what;
  if (bytes > 0) msg += " (" + std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB)";
  return Status(StatusCode::kEnvironment,
                msg + ": this is " + environment_hint(ENOMEM) + ", not a fault of the sample");
}

void environment_backoff(int attempt) {
  const int shift = attempt < 1 ? 0 : attempt - 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(kEnvironmentFirstBackoffMs << std::min(shift, 10)));
}

}  // namespace chute
