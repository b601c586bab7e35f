#include "chute/base/cores.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace chute {
namespace {

namespace fs = std::filesystem;

class CoresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("chute_cores_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  CgroupPaths paths() const { return {(root_ / "fs").string(), (root_ / "self").string()}; }
  static int affinity() {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  fs::path root_;
};

TEST_F(CoresTest, V2QuotaIsRoundedUp) {
  write("self", "0::/job\n");
  write("fs/job/cpu.max", "150000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 2);
}

TEST_F(CoresTest, V2MaxMeansNoLimit) {
  write("self", "0::/job\n");
  write("fs/job/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 0);
  EXPECT_EQ(available_cores(paths()), affinity());
}

TEST_F(CoresTest, V2TakesTheSmallestLimitUpToTheRoot) {
  write("self", "0::/outer/inner\n");
  write("fs/outer/inner/cpu.max", "400000 100000\n");
  write("fs/outer/cpu.max", "100000 100000\n");
  write("fs/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 1);
  EXPECT_EQ(available_cores(paths()), 1);  // never more than the quota, whatever the affinity
}

TEST_F(CoresTest, V2ContainerRootLimit) {
  write("self", "0::/\n");  // a cgroup namespace: the container's own cgroup is the mount's root
  write("fs/cpu.max", "50000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 1);  // half a CPU is still one thread's worth
}

TEST_F(CoresTest, V1CfsQuota) {
  write("self", "12:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n");
  write("fs/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "300000\n");
  write("fs/cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 3);
}

TEST_F(CoresTest, V1MinusOneMeansNoLimit) {
  write("self", "4:cpu,cpuacct:/\n");
  write("fs/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("fs/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 0);
}

TEST_F(CoresTest, MissingFilesMeanNoLimit) {
  EXPECT_EQ(cgroup_cpu_limit(paths()), 0);
  EXPECT_EQ(available_cores(paths()), affinity());
  write("self", "0::/job\n");
  write("fs/job/cpu.max", "garbage\n");
  EXPECT_EQ(cgroup_cpu_limit(paths()), 0);
}

TEST_F(CoresTest, AffinityBoundsTheQuota) {
  write("self", "0::/\n");
  write("fs/cpu.max", "100000000 100000\n");  // 1000 CPUs of quota
  EXPECT_EQ(available_cores(paths()), affinity());
  EXPECT_GE(available_cores(), 1);
  EXPECT_LE(available_cores(), affinity());
}

}  // namespace
}  // namespace chute
