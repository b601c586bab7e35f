#include "chute/gpu/numa.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>

#include "test_util.h"

namespace chute {
namespace {

TEST(NumaTest, ParsesCpulists) {
  EXPECT_EQ(parse_cpulist("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpulist("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpulist("\n"), (std::vector<int>{}));  // a memory-only node
  EXPECT_EQ(parse_cpulist("3,1-2,2"), (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(parse_cpulist("3-1"));
  EXPECT_FALSE(parse_cpulist("a-b"));
  EXPECT_FALSE(parse_cpulist("1,,2"));
  EXPECT_FALSE(parse_cpulist("-1"));
  EXPECT_FALSE(parse_cpulist("0-99999999"));
}

TEST(NumaTest, NormalizesPciBusIds) {
  EXPECT_EQ(normalize_pci_bus_id("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000000:3B:00.0"), "0000:3b:00.0");  // nvidia-smi's 8-digit domain
  EXPECT_EQ(normalize_pci_bus_id(" 0001:af:1f.7\n"), "0001:af:1f.7");
  EXPECT_EQ(normalize_pci_bus_id("3B:00.0"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:3G:00.0"), "");
  EXPECT_EQ(normalize_pci_bus_id("../../etc:00.0"), "");
  EXPECT_EQ(normalize_pci_bus_id(""), "");
}

class FakeSysfs {
 public:
  void write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((dir_.path() / rel).parent_path());
    std::ofstream(dir_.path() / rel) << text;
  }
  std::string root() const { return dir_.path().string(); }

 private:
  testing::TempDir dir_;
};

TEST(NumaTest, FindsTheGpusNodeAndItsCpus) {
  FakeSysfs fs;
  fs.write("bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
  fs.write("devices/system/node/node1/cpulist", "0-1,4\n");
  EXPECT_EQ(pci_numa_node(fs.root(), "00000000:3B:00.0"), 1);
  EXPECT_EQ(numa_node_cpus(fs.root(), 1), (std::vector<int>{0, 1, 4}));
  // Only the CPUs this process may use remain.
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> expected;
  for (int c : {0, 1, 4})
    if (CPU_ISSET(c, &allowed)) expected.push_back(c);
  EXPECT_EQ(pci_local_cpus(fs.root(), "0000:3B:00.0"), expected);
}

TEST(NumaTest, UnknownTopologyDegradesToNoPinning) {
  FakeSysfs fs;
  fs.write("bus/pci/devices/0000:01:00.0/numa_node", "-1\n");  // single node, many VMs
  fs.write("bus/pci/devices/0000:02:00.0/numa_node", "garbage");
  fs.write("bus/pci/devices/0000:03:00.0/numa_node", "0\n");  // node0 has no cpulist file
  fs.write("bus/pci/devices/0000:04:00.0/numa_node", "2\n");
  fs.write("devices/system/node/node2/cpulist", "1-x\n");
  EXPECT_EQ(pci_numa_node(fs.root(), "0000:01:00.0"), -1);
  EXPECT_EQ(pci_numa_node(fs.root(), "0000:02:00.0"), -1);
  EXPECT_EQ(pci_numa_node(fs.root(), "0000:09:00.0"), -1);  // no such device
  EXPECT_EQ(pci_numa_node(fs.root(), "not-a-bus-id"), -1);
  for (const char* id : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:09:00.0"})
    EXPECT_TRUE(pci_local_cpus(fs.root(), id).empty()) << id;
  EXPECT_TRUE(pci_local_cpus("/nonexistent-sysfs", "0000:01:00.0").empty());
}

TEST(NumaTest, RunOnCpusRunsPinnedAndWaits) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  int ran_on = -1, count = -1;
  run_on_cpus({first}, [&] {
    cpu_set_t mine;
    sched_getaffinity(0, sizeof(mine), &mine);
    count = CPU_COUNT(&mine);
    ran_on = sched_getcpu();
  });
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ran_on, first);
  bool ran = false;
  run_on_cpus({}, [&] { ran = true; });  // unknown topology: just runs
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace chute
