// NUMA placement for GPU delivery: the CPUs close to a GPU, read from sysfs. Worker threads pinned there
// decode into pinned buffers on the node whose memory controller the GPU's DMA reads from.
//
// Everything degrades to "unknown" (an empty list): no sysfs, a numa_node of -1 (single-node machines and
// many VMs), unreadable or malformed files, or CPUs this process may not run on.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chute {

// "0-3,8,10-11" (the kernel's cpulist format) -> {0,1,2,3,8,10,11}; nullopt if malformed.
std::optional<std::vector<int>> parse_cpulist(std::string_view text);

// "0000:3B:00.0" or "00000000:3B:00.0" (cudaDeviceGetPCIBusId, nvidia-smi) -> "0000:3b:00.0", the name
// under /sys/bus/pci/devices; empty if it is not a PCI address.
std::string normalize_pci_bus_id(std::string_view bus_id);

// The NUMA node of a PCI device, or -1 when unknown. `sysfs_root` is "/sys" (tests pass a fake tree).
int pci_numa_node(const std::string& sysfs_root, std::string_view bus_id);

// The CPUs of a NUMA node (empty when unknown).
std::vector<int> numa_node_cpus(const std::string& sysfs_root, int node);

// The CPUs local to the PCI device that this process may run on (sched_getaffinity); empty when the
// topology is unknown or none of them is allowed.
std::vector<int> pci_local_cpus(const std::string& sysfs_root, std::string_view bus_id);

// Runs `fn` on a thread pinned to `cpus` and waits for it: memory it allocates and touches first (the
// ring's pinned buffers) lands on those CPUs' node. With no CPUs, or if pinning fails, runs it unpinned.
void run_on_cpus(const std::vector<int>& cpus, const std::function<void()>& fn);

}  // namespace chute
