#include "chute/base/cores.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace chute {
namespace {

int affinity_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// ceil(quota / period) as CPUs, or 0 for no quota.
int quota_cpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::max<long long>(1, (quota + period - 1) / period));
}

// cgroup v2: "max 100000" (no limit) or "150000 100000".
int read_cpu_max(const std::string& dir) {
  std::ifstream f(dir + "/cpu.max");
  std::string quota;
  long long period = 0;
  if (!(f >> quota >> period) || quota == "max") return 0;
  try {
    return quota_cpus(std::stoll(quota), period);
  } catch (const std::exception&) {
    return 0;
  }
}

// cgroup v1: cpu.cfs_quota_us (-1: no limit) and cpu.cfs_period_us.
int read_cfs(const std::string& dir) {
  std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
  long long quota = 0, period = 0;
  if (!(q >> quota) || !(p >> period)) return 0;
  return quota_cpus(quota, period);
}

// The smallest limit `read` finds in `mount` + `path` and each of its parents up to `mount`.
template <typename Read>
int smallest_along(const std::string& mount, std::string path, Read read) {
  int best = 0;
  for (;;) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const int limit = read(path == "/" ? mount : mount + path);
    if (limit > 0) best = best == 0 ? limit : std::min(best, limit);
    if (path.empty() || path == "/") return best;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  }
}

}  // namespace

int cgroup_cpu_limit(const CgroupPaths& paths) {
  std::ifstream self(paths.self);
  std::string line;
  int best = 0;
  auto keep = [&](int limit) {
    if (limit > 0) best = best == 0 ? limit : std::min(best, limit);
  };
  bool any = false;
  while (std::getline(self, line)) {  // "hierarchy:controllers:path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    any = true;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {  // the v2 unified hierarchy
      keep(smallest_along(paths.root, path, read_cpu_max));
      continue;
    }
    std::stringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');) {
      if (c != "cpu") continue;  // v1: mounted as "cpu,cpuacct" or "cpu"
      keep(smallest_along(paths.root + "/" + controllers, path, read_cfs));
      keep(smallest_along(paths.root + "/cpu", path, read_cfs));
    }
  }
  if (!any) keep(read_cpu_max(paths.root));  // no membership file: the mount's own limit, if any
  return best;
}

int available_cores(const CgroupPaths& paths) {
  const int cores = affinity_cores(), limit = cgroup_cpu_limit(paths);
  return std::max(1, limit > 0 ? std::min(cores, limit) : cores);
}

int available_cores() { return available_cores(CgroupPaths{}); }

}  // namespace chute
