// Loader: the engine. A persistent pool of native threads turns a Source into batches.
//
//   source index --EpochOrder--> epoch position k --worker--> read, decode, transform --> batch slot
//   --in-order finaliser--> ready queue --next()--> consumer --Batch released--> ring
//
// Work is scheduled per sample: each idle thread takes the next epoch position and writes the sample
// straight into its place in a batch buffer from the BatchRing. Samples finish in any order; a finaliser
// walks them in epoch order, so batches come out in order and a slow sample holds back only its own batch
// while the other threads work ahead, up to `prefetch` batches past the consumer.
//
// A batch transform (MixUp / CutMix, batch_mix.h), when given, runs on the batch once its last sample is
// in place: the workers take it, in parts, before further samples (so the consumer's next batch comes
// first), while the other threads go on decoding later batches; next() hands out a batch only once it is
// mixed, with the draws it used (Batch::mix()).
//
// Errors travel with their sample. With ErrorPolicy::kRaise, the consumer receives every batch before the
// bad sample's batch, then the error in place of that batch (its other samples are dropped, as torch's
// DataLoader drops a batch whose fetch raised); a next call goes on with the following batch. With kSkip, the sample is
// recorded in errors() and the following samples move up to fill its place, so every batch but the epoch's last stays
// full.
//
// Thread-safety: one consumer thread calls start_epoch()/next(); close() may be called from any thread,
// and from several at once (each returns once the threads are gone; a consumer waiting in next() gets
// kCancelled "the loader is closed", never an end of epoch). Batch objects may be released on any thread,
// also after the loader is gone. In a process forked from the one that made it, the loader is closed and
// inert: its calls fail, close() and its destructor neither join nor lock (fork.h).
//
// Threads: the pool starts in create(). If the kernel refuses some (a pids limit, ulimit -v), the loader
// runs with those it got and says so once on stderr; if it refuses the first, create() fails with
// kResourceExhausted naming the limits (thread.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "chute/base/fork.h"
#include "chute/base/option_range.h"
#include "chute/engine/autotune.h"
#include "chute/engine/host_allocator.h"
#include "chute/engine/loader_order.h"
#include "chute/engine/processor.h"
#include "chute/engine/stats.h"
#include "chute/io/source.h"
#include "chute/order/sampler.h"
#include "chute/transform/batch_mix.h"
#include "chute/transform/output.h"
#include "chute/transform/transforms.h"

namespace chute {

enum class ErrorPolicy { kRaise, kSkip };
// "raise", "skip", and back.
const char* error_policy_name(ErrorPolicy policy);
Result<ErrorPolicy> parse_error_policy(std::string_view name);

// Everything a Loader is built from. The defaults are here and nowhere else; validate() is the one check
// (Loader::create runs it; the Python binding converts arguments against the same OptionRanges), and
// chute._native.LoaderOptions is this struct, constructed by keyword.

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  int num_threads = 0;  // threads that work; 0: auto, chosen by the Autotuner between 1 and max_threads
  int max_threads = 0;  // the pool, a CPU budget; 0: one per core this process may run on
  int prefetch = 0;     // batches prepared ahead of the consumer; 0: auto, within max_memory
  // Bytes of batch buffers, shared with the scratch of large decodes, which wait for room (decode_budget.h).
  // The ring holds prefetch + 2 buffers (+ extra_buffers): auto prefetch grows within max_memory, an
  // explicit prefetch is lowered to fit (Loader::notices() says so), and a max_memory that does not hold
  // prefetch 1's ring is refused, whatever the prefetch. A source that keeps shards in memory (a remote
  // dataset: Source::memory_wanted) takes its share first: at least what it needs, at most what it wants
  // or half of what prefetch 1's ring leaves, whichever is less; one that cannot have its least is refused.
  size_t max_memory = size_t{2} << 30;
  Shard shard;  // this process's rank and share of each epoch (sampler.h)
  // The epoch's order (sampler.h): kSample, a permutation of every sample (or sequential without shuffle),
  // ranks interleaved; kShards, the shard-window order over the source's shards (Source::shard_sizes(),
  // which must be non-empty), `shard_window` shards shuffled together, ranks in contiguous blocks.
  SampleOrder order = SampleOrder::kSample;
  // K, the shards whose samples are shuffled together. 8: a batch of 32 then draws from about 7 of them
  // (docs/ORDER.md measures it), while a rank keeps only 8 shards open (or cached, for a remote source), at
  // most 16 at a window boundary: 2-8 GiB for WebDataset's usual shards of 256 MiB to 1 GiB.
  int64_t shard_window = 8;
  OutputFormat output;
  DecodeOptions decode;
  ErrorPolicy on_error = ErrorPolicy::kRaise;
  // The ring starts with prefetch + 2 buffers; it grows, up to this many bytes, only while the consumer
  // keeps more batches alive than that.
  size_t max_ring_bytes = size_t{4} << 30;
  // Per-stage timing (stats(), and auto mode, which needs it). Off only to measure its cost.
  bool collect_stats = true;

  // --- GPU delivery (delivery.h) ---
  // Where the ring's buffers come from: the heap, or pinned memory (Device::host_allocator()).
  std::shared_ptr<HostAllocator> host_allocator = heap_allocator();
  // CPUs the worker threads are pinned to (e.g. the GPU's NUMA node, numa.h); none: not pinned.
  std::optional<std::vector<int>> cpu_affinity;
  // Buffers added to the ring for batches the consumer holds beyond the usual one: a DeviceLoader holds
  // each host batch until its copy to the device has completed. They count against max_memory too.
  int extra_buffers = 0;

  static constexpr OptionRange kBatchSize{"batch_size", 1, kInt64Max};
  static constexpr OptionRange kSeed{"seed", 0, kUInt64Max};
  static constexpr OptionRange kNumThreads{"num_threads", 1, kInt32Max, "'auto'"};
  static constexpr OptionRange kMaxThreads{"max_threads", 1, kInt32Max, "None"};
  static constexpr OptionRange kPrefetch{"prefetch", 1, kInt32Max, "'auto'"};
  static constexpr OptionRange kMaxMemory{"max_memory", 1, kUInt64Max};
  static constexpr OptionRange kMaxRingBytes{"max_ring_bytes", 1, kUInt64Max};
  static constexpr OptionRange kExtraBuffers{"extra_buffers", 0, kInt32Max};
  static constexpr OptionRange kRank{"rank", 0, kInt64Max};
  static constexpr OptionRange kWorldSize{"world_size", 1, kInt64Max};
  static constexpr OptionRange kShardWindow{"shard_window", 1, kInt64Max};
  // Ok, or kInvalidArgument naming the first option out of range or in conflict with another. Checks that
  // need the source or the pipeline (the shard against the dataset, buffer sizes) are Loader::create's.
  Status validate() const;
};

// A sample that failed: which one, where, why, in which epoch. The Python binding raises it as
// chute.SampleError (index, path, reason = status.to_string(), epoch).
struct FailedSample {
  int64_t index = 0;  // index in the source
  std::string path;
  Status status;
  uint64_t epoch = 0;
  std::string to_string() const;
};

struct SharedState;

// A delivered batch. Its buffers return to the ring when the last reference goes, on any thread.
class Batch {
 public:
  Batch(std::shared_ptr<SharedState> shared, int slot, int64_t size, MixParams mix = {});
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  int64_t size() const { return size_; }  // samples in this batch (the last one may be short)
  void* images() const { return images_; }
  int64_t* labels() const { return labels_; }
  // The batch transform's draws for this batch (kind kNone without one): the labels are the dataset's; the
  // caller mixes them with mix().label_lam, as torchvision's MixUp / CutMix do.
  const MixParams& mix() const { return mix_; }
  // With a hand-over allocator (BlockPool): the buffer becomes the consumer's when this Batch goes; its
  // slot takes a new block (batch_ring.h). Call on the consumer's thread, before the last reference goes.
  void hand_over() { handed_over_ = true; }

 private:
  std::shared_ptr<SharedState> shared_;
  int slot_;
  bool handed_over_ = false;
  int64_t size_;
  void* images_;
  int64_t* labels_;
  MixParams mix_;
};

class Loader {
 public:
  // `mix`: a batch transform applied to every batch (batch_mix.h); its ops must suit options.output.
  static Result<std::unique_ptr<Loader>> create(std::shared_ptr<const Source> source, Pipeline pipeline,
                                                LoaderOptions options, std::optional<BatchMix> mix = std::nullopt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's samples per epoch, and batches per epoch when no sample fails.
  int64_t epoch_size() const;
  int64_t num_batches() const;
  int num_threads() const { return static_cast<int>(threads_.size()); }  // the pool
  int active_threads() const;                                            // threads allowed to work now
  int prefetch() const;
  int out_height() const { return pipeline_.out_height(); }
  int out_width() const { return pipeline_.out_width(); }
  const LoaderOptions& options() const { return options_; }
  const std::optional<BatchMix>& batch_mix() const { return mix_; }
  // What create() changed from the options, in words, for the caller to show once (Python warns): an
  // explicit prefetch lowered to fit max_memory. Empty when the options were taken as given.
  const std::vector<std::string>& notices() const { return notices_; }

  // Starts (or restarts) an epoch; an epoch in flight is cancelled first. `start` resumes at that epoch
  // position (a value of position()): the batches are those an uninterrupted run would deliver next.
  Status start_epoch(uint64_t epoch, int64_t start = 0);
  // The rest of an interrupted epoch, maybe interrupted on other numbers of ranks (order/remainder.h): this
  // rank's share of the positions the ranks of `splits` did not receive, split as options().shard splits a
  // whole epoch, from `start` (a position() of this share) on. With no splits, start_epoch(). A split that
  // cannot be (a count outside its rank's share) is kInvalidArgument naming it.
  Status resume_epoch(uint64_t epoch, const std::vector<EpochSplit>& splits, int64_t start = 0);
  // The same with an explicit order: these source indices, in this order, batched by batch_size (a short
  // last batch unless drop_last), instead of the order the options describe (shuffle, order, shard). Augmentation
  // stays keyed by (seed, epoch, source index), where seed is `seed` when given (a torch DataLoader draws a
  // new one each epoch: chute.DataLoader passes it here), else options().seed. An index outside the source
  // is kInvalidArgument.
  Status start_epoch(uint64_t epoch, int64_t start, std::vector<int64_t> order,
                     std::optional<uint64_t> seed = std::nullopt);
  // The epoch position after the last sample the consumer received: where a resumed run starts. It does
  // not count work prefetched but not yet delivered.
  int64_t position() const;
  // The next batch of the epoch, nullptr after its last one, or an error: kRaise's sample error (in place
  // of its batch; the epoch goes on), kCancelled once the loader is closed, or a resource error. With a
  // `timeout`, a wait that outlasts it returns kDeadlineExceeded and can be retried (the Python binding
  // waits in slices so that Ctrl-C is handled while no batch is ready).
  Result<std::shared_ptr<Batch>> next(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // With kRaise, the sample whose error next() returned.
  std::optional<FailedSample> failed_sample() const;
  // Samples skipped so far (kSkip), oldest first; from the `first`-th on (to fetch only new ones).
  std::vector<FailedSample> errors(size_t first = 0) const;
  // Decoder warnings that left their image intact (e.g. libjpeg's "extraneous bytes before marker",
  // common in ImageNet), counted over the loader's life.
  int64_t decode_warnings() const;
  // Where the time went since creation or the last reset_stats(), with the current settings.
  LoaderStats stats() const;
  // Batch buffers delivered and still referenced by the consumer, and the most the ring may have
  // (max_ring_bytes). A caller that must never fail (the DataLoader fast path) copies batches out once
  // `held` nears `max_slots`, so that the engine always keeps buffers to work in.
  struct RingUsage {
    int held = 0;
    int max_slots = 0;
  };
  RingUsage ring_usage() const;
  void reset_stats();
  // Stops the threads. Batches still held stay valid. Idempotent and thread-safe.
  void close();

  // For a BlockPool host allocator: blocks of host_block_bytes() the pool should receive now, and the call
  // that wakes the workers once they were donated.
  int host_blocks_wanted() const;
  size_t host_block_bytes() const;
  void host_blocks_added();

 private:
  Loader(std::shared_ptr<const Source> source, Pipeline pipeline, OutputWriter writer, LoaderOptions options,
         LoaderOrder order, std::optional<BatchMix> mix, size_t source_memory);
  struct Task;
  struct MixTask;
  Status start_workers();
  Status begin_epoch(EpochKey key, int64_t start, std::unique_ptr<EpochOrder> order);
  void worker_main(int id);
  void tune(double now_s);  // with the lock held
  bool can_dispatch() const;
  bool needs_new_slot() const;  // the next dispatch needs a ring slot its batch does not have yet
  void grow_ring(std::unique_lock<std::mutex>& lock);
  Task& dispatch();
  bool complete(Task& task, Status status);
  void finish_epoch();
  void push_ready(int64_t batch, int64_t count, int64_t next_position);
  void run_mix(std::unique_lock<std::mutex>& lock);  // one part of a batch transform, taken from the queue
  void cancel_epoch(std::unique_lock<std::mutex>& lock);

  std::shared_ptr<const Source> source_;
  LoaderOrder order_;  // the epochs start_epoch(epoch) visits
  Pipeline pipeline_;
  OutputWriter writer_;
  LoaderOptions options_;
  std::optional<BatchMix> mix_;
  size_t source_memory_;  // the share of max_memory the source keeps (a remote dataset's shards in memory)
  std::vector<std::string> notices_;
  std::shared_ptr<SharedState> shared_;
  std::vector<std::thread> threads_;
  ForkMark fork_mark_;
  std::mutex close_mu_;  // held by close() while it stops and joins the threads
  struct EpochState;
  std::unique_ptr<EpochState> epoch_;  // guarded by shared_->mu
  Autotuner tuner_;                    // guarded by shared_->mu
};

}  // namespace chute
