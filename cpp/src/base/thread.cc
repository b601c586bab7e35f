#include "chute/base/thread.h"

#include <pthread.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chute {
namespace {

std::string limit_text(rlim_t v, const char* unit) {
  if (v == RLIM_INFINITY) return "unlimited";
  return std::to_string(v) + unit;
}

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The pids controller of this process's cgroup (v2: "0::/path"; v1: "N:pids:/path"), as "max/current".
std::string cgroup_pids() {
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const std::string dir = controllers.empty()                             ? "/sys/fs/cgroup" + path
                            : controllers.find("pids") != std::string::npos ? "/sys/fs/cgroup/pids" + path
                                                                            : "";
    if (dir.empty()) continue;
    const std::string max = first_line(dir + "/pids.max");
    if (max.empty()) continue;
    return max + " (" + first_line(dir + "/pids.current") + " in use)";
  }
  return "";
}

}  // namespace

void set_current_thread_name(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

void set_thread_name(std::thread::native_handle_type handle, const std::string& name) {
  pthread_setname_np(handle, name.substr(0, 15).c_str());
}

Status thread_start_error(const std::string& name, int err) {
  std::ostringstream m;
  m << "cannot start a " << name << " thread: " << std::strerror(err)
    << "; the process is at a limit on threads or memory:";
  rlimit lim{};
  if (getrlimit(RLIMIT_NPROC, &lim) == 0) m << " ulimit -u (RLIMIT_NPROC) " << limit_text(lim.rlim_cur, "");
  const std::string pids = cgroup_pids();
  m << ", cgroup pids.max " << (pids.empty() ? "(none found for this process)" : pids) << " (docker --pids-limit)";
  const std::string threads_max = first_line("/proc/sys/kernel/threads-max");
  if (!threads_max.empty()) m << ", kernel.threads-max " << threads_max;
  if (getrlimit(RLIMIT_AS, &lim) == 0)
    m << ", ulimit -v (RLIMIT_AS) "
      << (lim.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(lim.rlim_cur >> 10) + " KB");
  if (getrlimit(RLIMIT_STACK, &lim) == 0)
    m << " with " << limit_text(lim.rlim_cur == RLIM_INFINITY ? lim.rlim_cur : lim.rlim_cur >> 10, " KB")
      << " of stack per thread (ulimit -s)";
  m << ". Raise the limit, or ask for fewer threads (num_threads / max_threads)";
  return Status(StatusCode::kResourceExhausted, m.str());
}

}  // namespace chute
