#include "chute/engine/stats.h"

#include <gtest/gtest.h>

namespace chute {
namespace {

// A loader that ran 10 batches of 100 samples in 10 s on a 2-core machine, whose consumer waited 5 s of 10:
// input-bound. Each test changes the figures that make one rule apply.
LoaderStats input_bound() {
  LoaderStats s;
  s.elapsed_s = 10, s.samples = 1000, s.samples_delivered = 1000, s.batches = 10;
  s.wait_s = 5, s.consumer_s = 5;
  s.stages.read_ns = 1'000'000'000;       // 1 s
  s.stages.decode_ns = 12'000'000'000;    // 12 s
  s.stages.transform_ns = 4'000'000'000;  // 4 s
  s.worker_cpu_s = 17;                    // on a core whenever busy
  s.worker_idle_s = 1;
  s.threads = s.active_threads = 2, s.prefetch = 4;
  s.cores = 2, s.process_cpu_s = 19.5;  // 1.95 of 2 cores busy
  return s;
}

TEST(DiagnoseTest, UnknownBeforeTwoBatches) {
  LoaderStats s = input_bound();
  s.batches = 1;
  EXPECT_EQ(diagnose(s).bound, "unknown");
}

TEST(DiagnoseTest, ConsumerBoundUnderTheStallThreshold) {
  LoaderStats s = input_bound();
  s.wait_s = 0.5, s.consumer_s = 9.5;
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.bound, "consumer") << v.summary;
  EXPECT_EQ(v.limit, "");
  EXPECT_EQ(v.stage, "decode");
}

TEST(DiagnoseTest, SaturatedCoresWithIdleWorkersAreTheBusiestStageNotPrefetch) {
  // The case `chute doctor` got wrong: workers idle 30% of their time, but the process keeps 1.95 of its 2
  // cores busy. A larger prefetch cannot help; decode is the work.
  LoaderStats s = input_bound();
  s.worker_idle_s = 8;  // 8 / (8 + 17) = 32% idle
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.bound, "input");
  EXPECT_EQ(v.limit, "decode") << v.summary;
  EXPECT_NE(v.summary.find("1.95 of 2 cores busy"), std::string::npos) << v.summary;
}

TEST(DiagnoseTest, PrefetchOnlyWithIdleWorkersAndSpareCores) {
  LoaderStats s = input_bound();
  s.worker_idle_s = 8;
  s.process_cpu_s = 12;  // 1.2 of 2 cores: 0.8 to spare
  EXPECT_EQ(diagnose(s).limit, "prefetch") << diagnose(s).summary;
  s.worker_idle_s = 2;  // 2 / 19 = 11% idle: under kPrefetchIdle
  EXPECT_EQ(diagnose(s).limit, "decode");
}

TEST(DiagnoseTest, AutoPrefetchIsTheLimitOnlyAtItsMemoryCap) {
  // The case `chute doctor` got wrong: idle workers under auto prefetch advised "raise prefetch", which the
  // autotuner is already doing; setting it by hand was slower. Below the cap the busiest stage is the limit.
  LoaderStats s = input_bound();
  s.worker_idle_s = 8;
  s.process_cpu_s = 12;  // 0.8 cores to spare
  s.auto_prefetch = true;
  s.prefetch = 3, s.max_prefetch = 10;
  Verdict v = diagnose(s);
  EXPECT_EQ(v.limit, "decode") << v.summary;
  EXPECT_NE(v.summary.find("auto prefetch is growing on that (now 3, at most 10)"), std::string::npos) << v.summary;
  s.prefetch = 10;  // at the cap max_memory allows: the buffers hold the workers back
  v = diagnose(s);
  EXPECT_EQ(v.limit, "prefetch") << v.summary;
  EXPECT_NE(v.summary.find("auto prefetch is at the 10 batches max_memory allows"), std::string::npos) << v.summary;
}

TEST(DiagnoseTest, StorageWhenReadsDominate) {
  LoaderStats s = input_bound();
  s.stages.read_ns = 20'000'000'000;
  s.worker_cpu_s = 8;  // waiting on reads costs no CPU: storage still comes first
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.limit, "storage") << v.summary;
  EXPECT_EQ(v.stage, "storage");
}

TEST(DiagnoseTest, CoresWhenWorkersAreRunnableButNotRunning) {
  LoaderStats s = input_bound();
  s.worker_cpu_s = 9;    // 9 CPU-s in 17 busy seconds
  s.process_cpu_s = 11;  // 1.1 of 2 cores busy: another process had the rest
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.limit, "cores") << v.summary;
  EXPECT_EQ(v.stage, "decode");
  s.cores = 0, s.process_cpu_s = 0;  // without CPU figures, the workers' share alone
  EXPECT_EQ(diagnose(s).limit, "cores");
}

TEST(DiagnoseTest, WorkersShortOfCpuInAProcessThatKeepsItsCoresBusyAreTheBusiestStage) {
  // The process kept its 2 cores busy: what the workers lacked went to its own threads (the consumer, its
  // Python per batch, the step), not to another job. More cores for the workers would have to come from
  // those threads; the work per sample is what to change.
  LoaderStats s = input_bound();
  s.worker_cpu_s = 9;  // 9 CPU-s in 17 busy seconds
  // process_cpu_s 19.5: 1.95 of 2 cores busy
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.limit, "decode") << v.summary;
  EXPECT_NE(v.summary.find("this process's own threads"), std::string::npos) << v.summary;
}

TEST(DiagnoseTest, WithoutCpuFiguresPrefetchIsNeverClaimed) {
  LoaderStats s = input_bound();
  s.worker_idle_s = 8;
  s.cores = 0, s.process_cpu_s = 0;
  EXPECT_EQ(diagnose(s).limit, "decode");
}

TEST(DiagnoseTest, UnknownLimitWithoutStageTimes) {
  LoaderStats s = input_bound();
  s.stages = {};
  s.worker_cpu_s = 0;
  const Verdict v = diagnose(s);
  EXPECT_EQ(v.bound, "input");
  EXPECT_EQ(v.limit, "unknown");
  EXPECT_EQ(v.stage, "");
}

}  // namespace
}  // namespace chute
