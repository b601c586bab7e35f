// Statistics: where a loader's time goes, and a verdict on what limits it. Python formats them
// (chute.LoaderStats); C++ users read the struct and the verdict's summary.
//
// They stay on by default: a sample pays about six steady_clock reads and a quarter of a thread-CPU-time
// read (a system call), about 2 us on this project's VMs against the ~1 ms a sample costs, and the
// counters are summed under the lock the worker already takes per sample.
// `chute_bench --benchmark_filter=LoaderEpoch` measures epochs with statistics on and off.
#pragma once

#include <cstdint>
#include <string>

namespace chute {

// One worker's busy time per stage, accumulated by SampleProcessor over the samples it processes.
struct StageTimes {
  int64_t read_ns = 0;       // Source::read: storage
  int64_t decode_ns = 0;     // header, entropy decode, IDCT, colour conversion (and EXIF reorientation)
  int64_t transform_ns = 0;  // planning, resampling and writing the output layout and dtype
  int64_t bytes_read = 0;    // encoded bytes read from the source

  StageTimes& operator+=(const StageTimes& o) {
    read_ns += o.read_ns, decode_ns += o.decode_ns, transform_ns += o.transform_ns, bytes_read += o.bytes_read;
    return *this;
  }
};

// Counters since the loader was created (or since Loader::reset_stats()).
struct LoaderStats {
  double elapsed_s = 0;  // wall time covered
  int64_t samples = 0;   // samples processed by the workers (decoded or failed)
  int64_t batches = 0;   // batches delivered to the consumer
  int64_t samples_delivered = 0;
  int64_t errors_skipped = 0;  // samples left out under on_error='skip'
  int64_t decode_warnings = 0;
  StageTimes stages;         // summed over workers
  double batch_s = 0;        // finalising: placing samples and labels, publishing batches (under the lock)
  double worker_cpu_s = 0;   // the worker threads' CPU time (read every 4 samples: it lags by up to 3 per thread)
  double worker_idle_s = 0;  // time active workers waited with nothing they were allowed to start
  double wait_s = 0;         // the consumer's wait in next(): the data stall
  double fill_wait_s = 0;    // the part of wait_s spent before each epoch's first batch
  double consumer_s = 0;     // the consumer's own time between receiving a batch and asking for the next
  int64_t next_calls = 0;    // next() calls that returned a batch
  int64_t ready_sum = 0;     // batches already ready when those calls came: mean queue occupancy = sum / calls
  // Current settings (auto mode changes them as it runs).
  int threads = 0;         // threads in the pool (max_threads)
  int active_threads = 0;  // threads allowed to work
  int prefetch = 0;        // batches prepared ahead of the consumer
  int max_prefetch = 0;    // the most auto prefetch may grow to within max_memory (= prefetch when set by hand)
  bool auto_threads = false;
  bool auto_prefetch = false;
  size_t slot_bytes = 0;      // one batch buffer
  size_t slot_footprint = 0;  // the memory one buffer holds: more where blocks are rounded (torch's pinned)
  int ring_slots = 0;         // batch buffers allocated
  // The machine, for the verdict: the cores this process may use, and the CPU time the whole process
  // (workers, consumer, anything else in it) used over elapsed_s. 0 where unknown.
  int cores = 0;
  double process_cpu_s = 0;

  double stall_fraction() const;  // wait / (wait + consumer time); 0 before any batch
};

// What limits the loader, from its statistics: the one verdict engine. chute.Loader.stats(), the drop-in
// DataLoader's fast paths and `chute doctor` (for every loader, torch's DataLoader included, through the
// binding `chute._native.diagnose`) all call it, so they cannot disagree.
//
// Contract (the rules, in order; the numbers are the constants below):
// - "unknown" before kMinVerdictBatches batches.
// - "consumer"-bound when the consumer waited under kInputBoundStall of its time (wait + own work).
// - Otherwise "input"-bound, and `limit` says by what:
//   1. "storage" when reads are at least kStorageShare of the workers' busy time.
//   2. "prefetch" when the active workers were idle over kPrefetchIdle of their time while the consumer
//      waited, and the process left at least kSpareCores of its cores unused: the window or the buffers,
//      not a stage or the CPU, held the workers back. Without spare cores, idle workers are not the
//      cause: the cores are. With auto prefetch only at its cap (max_prefetch, from max_memory): below
//      it, the autotuner grows prefetch on this same evidence, so the window is not what to change and
//      the rules below name the limit.
//   3. "cores" when the workers got under kContendedCpu CPU-seconds per busy second (runnable but not
//      running) while the process left at least kSpareCores of its cores unused: other processes (another
//      job, a CPU hog) had the cores. Where the process itself kept its cores busy (its consumer, the
//      training step's threads, its Python per batch took what the workers lacked), the work is the
//      limit: rule 4. Without CPU figures (cores or process_cpu_s unknown), the workers' share alone.
//   4. the busiest stage, "decode" or "transform", whether or not the workers kept every core busy: it is
//      the work to make cheaper, or to give more cores; "unknown" when no stage time was measured.
struct Verdict {
  std::string bound;    // "input" (the consumer waits for data), "consumer" (the loader is ahead) or "unknown"
  std::string limit;    // when input-bound: "storage", "prefetch", "cores", "decode", "transform" or "unknown";
                        // otherwise ""
  std::string stage;    // the busiest stage of the workers ("storage", "decode", "transform"), even when
                        // the limit is "prefetch" or "cores"; "" before any sample
  std::string summary;  // one paragraph with the numbers behind it
};

// Batches a verdict needs: fewer say "not enough batches yet" (the doctor honours the same count).
inline constexpr int64_t kMinVerdictBatches = 2;
inline constexpr double kInputBoundStall = 0.10;
inline constexpr double kStorageShare = 0.5;
inline constexpr double kPrefetchIdle = 0.20;  // the autotuner grows prefetch on the same evidence (kIdleGrow)
inline constexpr double kSpareCores = 0.5;
// Measured with bench/doctor_planted.py on 2 cores: two busy workers beside their own process's main thread
// and the doctor's samplers got 0.7-0.9 CPU-s per busy second (0.8 called 1 of 5 plain decode runs "cores");
// beside two CPU-spinning processes, about 0.5.
inline constexpr double kContendedCpu = 0.6;

Verdict diagnose(const LoaderStats& stats);

}  // namespace chute
