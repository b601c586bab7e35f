// Autotuner: how many of the pool's threads work, and how many batches are prepared ahead.
//
// Contract
// - It sees the engine through cumulative counters (TunerObservation), one observation per call, and
//   decides once per window: at least kWindowSeconds and kWindowBatches delivered batches since the last
//   decision. It is a pure function of the observations (no clock of its own), so tests drive it with
//   simulated stage rates and a fake clock.
// - Threads. The consumer's demand D is the samples it takes per second of its own time (waiting
//   excluded); a worker needs w seconds of busy time per sample. Serving D takes D*w threads; the target
//   is ceil(kHeadroom*D*w), within [1, max_threads]. While the consumer stalls (waits over
//   kStallGrow of its time) it adds at least one thread per window. It shrinks only after a window in
//   which the consumer did not stall (under kStallShrink), and never below a floor: one more than a count
//   at which the consumer stalled, kept until the demand moves by more than kDemandChange. So a steady
//   workload settles within a few windows and stays put, rather than oscillating around the edge.
// - Prefetch. It starts at enough batches to keep every thread busy (at least 2), and grows by one per
//   window while the consumer stalls and the active workers were idle over kIdleGrow of their time:
//   then the window, not a stage, held them back. It never exceeds what max_memory holds (prefetch + the
//   reserved buffers) and never shrinks (buffers already allocated are reused).
// - Memory. The ring holds prefetch + reserved_buffers batch buffers (2: the one filling and the one the
//   consumer holds, plus a DeviceLoader's host batches in flight), all within max_memory: max_prefetch()
//   is that rule for auto and explicit prefetch alike, and check_memory() refuses settings under which
//   not even prefetch 1 fits.
// - A fixed setting (threads or prefetch given by the user) is never changed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chute/base/status.h"
#include "chute/engine/stats.h"

namespace chute {

struct TunerObservation {
  double now_s = 0;       // a steady clock, in seconds
  int64_t samples = 0;    // samples processed by the workers
  double busy_s = 0;      // the workers' busy time (read + decode + transform), summed over threads
  double idle_s = 0;      // active workers' time with nothing they were allowed to start
  double wait_s = 0;      // the consumer's time waiting for batches
  double consumer_s = 0;  // the consumer's own time between batches
  int64_t batches = 0;    // batches delivered
  int64_t samples_delivered = 0;
};

struct TunerSettings {
  int max_threads = 1;        // the pool: a CPU budget
  bool tune_threads = true;   // false: threads stay at `threads`
  int threads = 1;            // initial (or fixed) active threads
  bool tune_prefetch = true;  // false: prefetch stays at `prefetch`
  int prefetch = 2;           // initial (or fixed)
  int64_t batch_size = 1;
  size_t slot_bytes = 0;     // one batch buffer
  size_t max_memory = 0;     // budget for every batch buffer of the ring
  int reserved_buffers = 2;  // buffers besides the prefetch window (LoaderOptions::extra_buffers adds to 2)
};

class Autotuner {
 public:
  static constexpr double kWindowSeconds = 0.5;
  static constexpr int64_t kWindowBatches = 2;
  static constexpr double kHeadroom = 1.25;
  static constexpr double kStallGrow = 0.05;
  static constexpr double kStallShrink = 0.02;
  static constexpr double kDemandChange = 0.30;
  static constexpr double kIdleGrow = kPrefetchIdle;  // the verdict's "prefetch" rule (stats.h)

  explicit Autotuner(const TunerSettings& settings);

  // The prefetch a tuned loader starts with for these settings, and the most max_memory allows (at least 1).
  static int initial_prefetch(const TunerSettings& settings);
  static int max_prefetch(const TunerSettings& settings);
  // Ok when max_memory holds prefetch 1's ring (1 + reserved_buffers buffers); else kInvalidArgument
  // naming max_memory, the buffer size and the count.
  static Status check_memory(const TunerSettings& settings);

  // Feeds one observation; returns true when threads() or prefetch() changed.
  bool observe(const TunerObservation& now);

  int threads() const { return threads_; }
  int prefetch() const { return prefetch_; }
  // The most prefetch() may become: max_prefetch for a tuned prefetch, else the fixed one.
  int prefetch_limit() const { return settings_.tune_prefetch ? max_prefetch(settings_) : prefetch_; }
  int64_t decisions() const { return decisions_; }

 private:
  TunerSettings settings_;
  int threads_;
  int prefetch_;
  bool started_ = false;
  TunerObservation last_;  // at the start of the current window
  int floor_ = 1;
  double floor_demand_ = 0;  // the demand when the floor was set
  int64_t decisions_ = 0;
};

}  // namespace chute
