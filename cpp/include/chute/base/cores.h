// available_cores(): how many CPUs this process may keep busy. The one answer every thread-pool size in
// chute starts from (the loader's max_threads, the packer, the gatherer, the statistics' "cores", and the
// Python layer through chute._native.available_cores).
//
// It honours both limits a container or a scheduler sets: the CPU affinity mask (taskset, cpusets,
// sched_getaffinity) and the CFS bandwidth quota of the process's cgroup (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us), rounded up, on the process's cgroup and every parent. The result
// is at least 1. std::thread::hardware_concurrency() sees neither.
// Thread-safety: reads files and the affinity mask; safe from any thread.
#pragma once

#include <string>

namespace chute {

int available_cores();

// Where the cgroup limits are read (for tests: a fake tree).
struct CgroupPaths {
  std::string root = "/sys/fs/cgroup";     // where cgroupfs is mounted
  std::string self = "/proc/self/cgroup";  // the process's cgroup membership
};

// The CPUs the cgroup quota allows (ceil(quota / period), the smallest along the path to the root), or 0
// when no quota is set or none can be read.
int cgroup_cpu_limit(const CgroupPaths& paths = {});

// min(affinity CPUs, cgroup limit), at least 1.
int available_cores(const CgroupPaths& paths);

}  // namespace chute
