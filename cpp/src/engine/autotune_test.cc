// The Autotuner against simulated pipelines: a fake clock, workers with a fixed cost per sample on a
// fixed number of cores, and a consumer with a fixed step time. Everything is deterministic.
#include "chute/engine/autotune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace chute {
namespace {

// A steady-state model of the engine, advanced in ticks of `dt` seconds.
struct SimulatedPipeline {
  int cores = 16;               // CPUs the workers can use
  double sample_cost_s = 1e-3;  // one worker's busy time per sample on its own core
  double step_s = 0.0;          // the consumer's time per batch
  int64_t batch_size = 64;
  double jitter = 0.0;  // relative, alternating +/-, on the worker cost

  TunerObservation totals;
  int64_t tick = 0;

  void advance(double dt, int threads, int prefetch) {
    const double sign = (tick++ % 2) ? 1.0 : -1.0;
    const double cost = sample_cost_s * (1.0 + sign * jitter);
    // Threads beyond the cores share them: each sample then takes longer in wall time.
    const double oversubscription = std::max(1.0, static_cast<double>(threads) / cores);
    const double supply = threads / (cost * oversubscription);  // samples/s the workers can produce
    // A prefetch window under 4 samples per thread leaves threads waiting: it halves the supply.
    const double window_cap = prefetch * batch_size >= 4 * threads ? supply : supply * 0.5;
    const double demand = step_s > 0 ? batch_size / step_s : 1e12;
    const double rate = std::min(window_cap, demand);
    const double samples = rate * dt;
    const double batches = samples / batch_size;
    totals.now_s += dt;
    totals.samples += static_cast<int64_t>(samples);
    totals.samples_delivered += static_cast<int64_t>(samples);
    totals.batches += static_cast<int64_t>(std::ceil(batches));
    const double busy = samples * cost * oversubscription;
    totals.busy_s += busy;
    totals.idle_s += std::max(0.0, threads * dt - busy);
    const double own = std::min(dt, batches * step_s);
    totals.consumer_s += own;
    totals.wait_s += dt - own;
  }
};

TunerSettings settings(int max_threads, int64_t batch_size = 64) {
  TunerSettings s;
  s.max_threads = max_threads;
  s.threads = max_threads;
  s.batch_size = batch_size;
  s.slot_bytes = 1 << 20;
  s.max_memory = size_t{64} << 20;
  return s;
}

// Runs `seconds` of simulated time; returns the thread count after every decision.
std::vector<int> run(Autotuner& tuner, SimulatedPipeline& sim, double seconds, double dt = 0.1) {
  std::vector<int> history;
  for (double t = 0; t < seconds; t += dt) {
    sim.advance(dt, tuner.threads(), tuner.prefetch());
    const int64_t before = tuner.decisions();
    tuner.observe(sim.totals);
    if (tuner.decisions() != before) history.push_back(tuner.threads());
  }
  return history;
}

int changes(const std::vector<int>& history, size_t from) {
  int n = 0;
  for (size_t i = std::max<size_t>(from, 1); i < history.size(); ++i) n += history[i] != history[i - 1];
  return n;
}

TEST(AutotunerTest, AFastConsumerKeepsEveryThread) {
  SimulatedPipeline sim;  // step 0: the consumer takes batches as fast as they come
  Autotuner tuner(settings(16));
  const auto history = run(tuner, sim, 10);
  ASSERT_FALSE(history.empty());
  for (int t : history) EXPECT_EQ(t, 16);
}

TEST(AutotunerTest, ASlowConsumerGetsJustEnoughThreadsWithinAFewSeconds) {
  // Demand: 64 samples per 20 ms = 3200/s; each sample costs 1 ms: 3.2 threads, 4 with headroom.
  SimulatedPipeline sim{.cores = 16, .sample_cost_s = 1e-3, .step_s = 0.020};
  Autotuner tuner(settings(16));
  const auto history = run(tuner, sim, 30);
  ASSERT_GE(history.size(), 10u);
  // Within 3 s (6 windows of 0.5 s) it settles, then stays put.
  EXPECT_EQ(changes(history, 6), 0) << "oscillates";
  EXPECT_EQ(history.back(), 4);
  // ... and it serves the consumer: no stall at the settled count.
  const double stall_before = sim.totals.wait_s;
  run(tuner, sim, 5);
  EXPECT_LT(sim.totals.wait_s - stall_before, 0.05 * 5);
}

TEST(AutotunerTest, GrowsBackWhenTheConsumerSpeedsUp) {
  SimulatedPipeline sim{.cores = 16, .sample_cost_s = 1e-3, .step_s = 0.040};  // 1.6 threads
  Autotuner tuner(settings(16));
  run(tuner, sim, 10);
  EXPECT_EQ(tuner.threads(), 2);
  sim.step_s = 0.008;  // 8000 samples/s: 8 threads, 10 with headroom
  const auto history = run(tuner, sim, 10);
  EXPECT_EQ(history.back(), 10);
  EXPECT_EQ(changes(history, 6), 0);  // settled within 3 s
}

TEST(AutotunerTest, NeverExceedsMaxThreadsAndHoldsThereWhenInputBound) {
  // Demand beyond what 4 threads can give: it stays at the budget.
  SimulatedPipeline sim{.cores = 16, .sample_cost_s = 2e-3, .step_s = 0.004};
  Autotuner tuner(settings(4));
  const auto history = run(tuner, sim, 10);
  for (int t : history) EXPECT_EQ(t, 4);
}

TEST(AutotunerTest, DoesNotOscillateAroundTheEdgeWithNoisyRates) {
  // Demand just above a whole number of threads, with the cost alternating by 10%: a naive controller
  // flips between two counts; the floor keeps it at the higher one.
  SimulatedPipeline sim{.cores = 16, .sample_cost_s = 1e-3, .step_s = 0.0215, .jitter = 0.10};
  Autotuner tuner(settings(16));
  const auto history = run(tuner, sim, 60);
  ASSERT_GE(history.size(), 60u);
  EXPECT_LE(changes(history, 10), 1);
}

TEST(AutotunerTest, ContentionForCoresIsNotMistakenForDemand) {
  // Only 2 cores: 8 threads each run at a quarter speed; the busy time per sample grows with them, so
  // the model asks for no more than the budget and the rate is what 2 cores give.
  SimulatedPipeline sim{.cores = 2, .sample_cost_s = 1e-3, .step_s = 0.0};
  Autotuner tuner(settings(8));
  run(tuner, sim, 10);
  EXPECT_EQ(tuner.threads(), 8);  // input-bound: it may not shrink while the consumer waits
}

TEST(AutotunerTest, GrowsPrefetchWhileWorkersIdleAndTheConsumerWaitsWithinTheMemoryBudget) {
  // Batch 8 and 16 threads: it starts at 2*16/8 + 1 = 5 batches; the simulated pipeline needs 4 samples
  // per thread in the window, 8 batches.
  TunerSettings s = settings(16, 8);
  s.max_memory = size_t{12} << 20;  // 12 buffers of 1 MiB: prefetch at most 10
  EXPECT_EQ(Autotuner::initial_prefetch(s), 5);
  EXPECT_EQ(Autotuner::max_prefetch(s), 10);
  SimulatedPipeline sim{.cores = 16, .sample_cost_s = 1e-3, .step_s = 0.0, .batch_size = 8};
  Autotuner tuner(s);
  run(tuner, sim, 10);
  EXPECT_EQ(tuner.prefetch(), 8);  // grew while idle workers starved the consumer, then stopped

  s.max_memory = size_t{8} << 20;  // now the budget stops it first
  SimulatedPipeline sim2{.cores = 16, .sample_cost_s = 1e-3, .step_s = 0.0, .batch_size = 8};
  Autotuner capped(s);
  run(capped, sim2, 10);
  EXPECT_EQ(capped.prefetch(), 6);
}

TEST(AutotunerTest, FixedSettingsNeverChange) {
  TunerSettings s = settings(16);
  s.tune_threads = false;
  s.threads = 3;
  s.tune_prefetch = false;
  s.prefetch = 1;
  SimulatedPipeline sim{.cores = 16, .sample_cost_s = 1e-3, .step_s = 0.0};
  Autotuner tuner(s);
  run(tuner, sim, 10);
  EXPECT_EQ(tuner.threads(), 3);
  EXPECT_EQ(tuner.prefetch(), 1);
}

TEST(AutotunerTest, DecidesOnlyOncePerWindow) {
  Autotuner tuner(settings(4));
  TunerObservation o;
  tuner.observe(o);  // the start
  o.now_s = 0.3, o.batches = 10, o.samples = 640, o.samples_delivered = 640, o.busy_s = 0.6, o.consumer_s = 0.3;
  tuner.observe(o);
  EXPECT_EQ(tuner.decisions(), 0);  // under kWindowSeconds
  o.now_s = 0.6, o.batches = 11;
  tuner.observe(o);
  EXPECT_EQ(tuner.decisions(), 1);
  o.now_s = 1.5, o.batches = 12;
  tuner.observe(o);
  EXPECT_EQ(tuner.decisions(), 1);  // one batch: too few to judge
}

}  // namespace
}  // namespace chute
