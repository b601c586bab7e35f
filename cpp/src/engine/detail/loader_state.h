// What the Loader's two halves share: its thread pool and tuning (loader.cc) and its epochs, dispatch and
// in-order finalising (loader_epoch.cc). Internal to those files.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "chute/base/cancel.h"
#include "chute/base/fork.h"
#include "chute/engine/batch_ring.h"
#include "chute/engine/loader.h"

namespace chute {

// What the loader, its threads and the batches it handed out share. Batches keep it alive, so a batch
// released after the loader is gone still finds its ring.
struct SharedState {
  std::mutex mu;
  // Two conditions, so that a finished sample does not wake the consumer and a consumer does not wake
  // the workers for nothing. Each waiter re-checks its own predicate.
  std::condition_variable work_cv;      // workers: something to dispatch (slot freed, window moved, epoch)
  std::condition_variable consumer_cv;  // consumer: batch ready, epoch over, error, no task in flight
  BatchRing ring;                       // guarded by mu
  ForkMark fork_mark;                   // in a forked child, released batches leave all this alone

  SharedState(int64_t batch_size, size_t sample_bytes, int slots, size_t max_bytes,
              std::shared_ptr<HostAllocator> allocator)
      : ring(batch_size, sample_bytes, slots, max_bytes, std::move(allocator)) {}
};

// One sample in flight: where it goes and, once done, how it went.
struct Loader::Task {
  uint64_t generation = 0;
  int64_t position = 0;         // k: its place in the epoch order
  int64_t index = 0;            // its index in the source
  int64_t target = -1;          // the batch position it was written to; -1 when staged
  std::vector<uint8_t> staged;  // its pixels, when its target was still taken (after a skipped sample)
  void* dst = nullptr;
  bool done = false;
  Status status;
};

// One part of a finished batch's transform (batch_mix.h), waiting for a worker.
struct Loader::MixTask {
  uint64_t generation = 0;
  int slot = 0;
  int64_t count = 0;
  MixParams params;
  int part = 0, parts = 1;
};

struct Loader::EpochState {
  bool stop = false;
  uint64_t generation = 0;  // bumped when an epoch is cancelled: tasks of older ones are dropped
  // The reads of this generation's tasks watch it (a remote shard's download): cancelled with the epoch,
  // so that ending it never waits on the network (chute/base/cancel.h).
  std::shared_ptr<CancelToken> reads = CancelToken::make();
  bool active = false;
  uint64_t epoch = 0;
  uint64_t seed = 0;  // keys this epoch's augmentation with `epoch` (start_epoch)
  std::unique_ptr<EpochOrder> order;
  int64_t next = 0;                   // next epoch position to dispatch
  int64_t frontier = 0;               // next epoch position to finalise
  int64_t start = 0;                  // the epoch position this run of the epoch began at (a resume point)
  int64_t failures = 0;               // skipped samples between start and the frontier
  int64_t consumed = 0;               // the epoch position after the last sample the consumer received
  int64_t max_target = -1;            // highest batch position written in place
  int64_t delivered = 0;              // batches handed to the consumer
  int in_flight = 0;                  // tasks running outside the lock
  bool finished = false;              // every sample finalised
  std::map<int64_t, int> batch_slot;  // batch -> slot, while it fills
  std::map<int64_t, Task> tasks;      // position -> task, until finalised
  struct Ready {
    int slot;
    int64_t count;
    int64_t next_position;              // the epoch position after the batch's last sample
    std::optional<FailedSample> error;  // kRaise: a sample of this batch failed; the error replaces it
    MixParams mix;                      // the batch transform's draws
    int mix_parts_left = 0;             // parts of the batch transform still to run: not deliverable before
  };
  // A sample's place in the output stream of this run: its position minus the resume point and the
  // skipped samples before it.
  int64_t output_position(int64_t position) const { return position - start - failures; }
  std::deque<Ready> ready;
  std::deque<MixTask> mixing;                    // parts of batch transforms for the workers, before any new sample
  std::map<int64_t, FailedSample> batch_errors;  // kRaise: batch -> its first failed sample, until ready
  std::optional<FailedSample> failed;            // the error the last next() returned
  std::vector<FailedSample> errors;              // kSkip: every skipped sample
  int64_t decode_warnings = 0;                   // benign decoder warnings, over the loader's life
  bool warned_growth = false;
  // Statistics over the loader's life (stats() reports them since the last reset_stats()).
  LoaderStats totals;
  LoaderStats baseline;         // totals at the last reset
  double baseline_s = 0;        // when it was taken
  double baseline_cpu_s = 0;    // the process's CPU time then
  double last_delivery_s = -1;  // when the consumer last received a batch; -1 once it asked again
};

namespace detail {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace detail
}  // namespace chute
