#include "chute/engine/loader.h"

#include "chute/base/cores.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <optional>

#include "chute/base/cancel.h"
#include "chute/base/environment.h"
#include "chute/base/fork.h"
#include "chute/base/thread.h"
#include "chute/engine/batch_ring.h"
#include "chute/engine/processor.h"
#include "chute/order/sampler.h"

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

// Called with shared->mu held: the ring's slot table may grow on other threads.
Batch::Batch(std::shared_ptr<SharedState> shared, int slot, int64_t size)
    : shared_(std::move(shared)),
      slot_(slot),
      size_(size),
      images_(shared_->ring.images(slot)),
      labels_(shared_->ring.labels(slot)) {}

Batch::~Batch() {
  std::vector<BatchRing::Buffer> retired;     // a closed ring's memory, freed after the lock (cudaFreeHost syncs)
  if (shared_->fork_mark.in_child()) return;  // mu may be held by a thread that is not in this process
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->ring.release(slot_, handed_over_);
    retired = shared_->ring.take_retired();
  }
  shared_->work_cv.notify_all();
}

std::string FailedSample::to_string() const {
  return "sample " + std::to_string(index) + " (" + path + "): " + status.to_string();
}

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
  };
  // A sample's place in the output stream of this run: its position minus the resume point and the
  // skipped samples before it.
  int64_t output_position(int64_t position) const { return position - start - failures; }
  std::deque<Ready> ready;
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

namespace {
constexpr int kMaxThreads = 4096;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double process_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

size_t slot_bytes_for(int64_t batch_size, size_t sample_bytes) {
  return static_cast<size_t>(batch_size) * (sample_bytes + sizeof(int64_t));
}

TunerSettings tuner_settings(const LoaderOptions& o, size_t sample_bytes) {
  TunerSettings t;
  t.max_threads = o.max_threads;
  t.tune_threads = o.num_threads == 0;
  t.threads = o.num_threads == 0 ? o.max_threads : o.num_threads;  // auto starts with every thread
  t.tune_prefetch = o.prefetch == 0;
  t.prefetch = o.prefetch;
  t.batch_size = o.batch_size;
  t.slot_bytes = slot_bytes_for(o.batch_size, sample_bytes);
  t.max_memory = o.max_memory;
  return t;
}

// The counters of `a` minus those of `b`; settings are left as in `a`.
LoaderStats minus(LoaderStats a, const LoaderStats& b) {
  a.samples -= b.samples, a.batches -= b.batches, a.samples_delivered -= b.samples_delivered;
  a.errors_skipped -= b.errors_skipped, a.decode_warnings -= b.decode_warnings;
  a.stages.read_ns -= b.stages.read_ns, a.stages.decode_ns -= b.stages.decode_ns;
  a.stages.transform_ns -= b.stages.transform_ns, a.stages.bytes_read -= b.stages.bytes_read;
  a.batch_s -= b.batch_s, a.worker_cpu_s -= b.worker_cpu_s, a.worker_idle_s -= b.worker_idle_s;
  a.wait_s -= b.wait_s, a.fill_wait_s -= b.fill_wait_s, a.consumer_s -= b.consumer_s;
  a.next_calls -= b.next_calls, a.ready_sum -= b.ready_sum;
  return a;
}
}  // namespace

Result<std::unique_ptr<Loader>> Loader::create(std::shared_ptr<const Source> source, Pipeline pipeline,
                                               LoaderOptions options) {
  if (source == nullptr) return invalid_argument("source is null");
  CHUTE_RETURN_IF_ERROR(options.validate());
  CHUTE_RETURN_IF_ERROR(EpochOrder::check_shard(source->size(), options.shard));
  ShardWindows windows{.shard_sizes = {}, .window = options.shard_window};
  if (options.order == SampleOrder::kShards) {
    windows.shard_sizes = source->shard_sizes();
    if (windows.shard_sizes.empty())
      return invalid_argument("order='shards' reads a source shard by shard, and this " + source_kind(*source) +
                              " is not stored in shards (chute pack's shards or tar files are): use "
                              "order='sample', or pack the source with `chute pack`");
    CHUTE_RETURN_IF_ERROR(windows.check());
    int64_t total = 0;
    for (int64_t n : windows.shard_sizes) total += n;
    if (total != source->size())
      return invalid_argument("the " + source_kind(*source) + "'s shards hold " + std::to_string(total) +
                              " samples, the source " + std::to_string(source->size()) + " (a bug in that source)");
  }
  // A pool of tens of thousands of threads would start (the kernel allows it), then crawl: not a budget.
  if (std::max(options.num_threads, options.max_threads) > kMaxThreads)
    return invalid_argument("num_threads/max_threads of " +
                            std::to_string(std::max(options.num_threads, options.max_threads)) + " exceeds " +
                            std::to_string(kMaxThreads) + " threads; about one per core is enough (" +
                            std::to_string(available_cores()) + " here)");
  CHUTE_ASSIGN_OR_RETURN(OutputWriter writer, OutputWriter::create(pipeline.out_height(), pipeline.out_width(),
                                                                   options.output, pipeline.normalize()));
  if (options.max_threads == 0) options.max_threads = options.num_threads > 0 ? options.num_threads : available_cores();
  // Auto prefetch (0) stays within max_memory, so only a given prefetch can overflow the ring's sizes.
  CHUTE_RETURN_IF_ERROR(BatchRing::check_size(options.batch_size, writer.sample_bytes(),
                                              int64_t{std::max(options.prefetch, 1)} + 2 + options.extra_buffers));
  const size_t slot_bytes = slot_bytes_for(options.batch_size, writer.sample_bytes());
  if (options.prefetch == 0 && options.max_memory / slot_bytes < 3)
    return invalid_argument("max_memory of " + std::to_string(options.max_memory >> 20) +
                            " MiB holds fewer than 3 batch buffers of " + std::to_string(slot_bytes >> 20) +
                            " MiB (prefetch 1 and 2 more): raise max_memory, lower batch_size or set prefetch");
  // An explicit prefetch is bounded by max_memory too: prefetch + 2 buffers must fit, down to prefetch 1.
  // (Python warns when it was lowered: Loader::prefetch() is then below the requested value.)
  if (options.prefetch > 0) {
    const int64_t fits = static_cast<int64_t>(options.max_memory / slot_bytes) - 2;
    options.prefetch = static_cast<int>(std::clamp<int64_t>(fits, 1, options.prefetch));
  }
  // Large decodes share max_memory with the batch buffers (decode_budget.h).
  if (!options.decode.budget) options.decode.budget = std::make_shared<DecodeBudget>(options.max_memory);
  std::unique_ptr<Loader> loader(new Loader(std::move(source), std::move(pipeline), std::move(writer), options));
  loader->shard_windows_ = std::move(windows);
  CHUTE_RETURN_IF_ERROR(loader->start_workers());
  return loader;
}

Loader::Loader(std::shared_ptr<const Source> source, Pipeline pipeline, OutputWriter writer, LoaderOptions options)
    : source_(std::move(source)),
      pipeline_(std::move(pipeline)),
      writer_(std::move(writer)),
      options_(options),
      epoch_(std::make_unique<EpochState>()),
      tuner_(tuner_settings(options_, writer_.sample_bytes())) {
  shared_ = std::make_shared<SharedState>(options_.batch_size, writer_.sample_bytes(),
                                          tuner_.prefetch() + 2 + options_.extra_buffers, options_.max_ring_bytes,
                                          options_.host_allocator);
  options_.decode.budget->set_reserved(shared_->ring.slots_with_memory() * shared_->ring.slot_bytes());
  epoch_->baseline_s = now_s();
  epoch_->baseline_cpu_s = process_cpu_s();
}

// Thread creation can fail (a pids limit, ulimit -v, a huge max_threads): with at least one thread the
// loader runs with those it got and says so once; with none it cannot run and create() fails.
Status Loader::start_workers() {
  const int pool = options_.num_threads > 0 ? options_.num_threads : options_.max_threads;
  const Status st = start_threads(
      "chute-worker", 0, pool, [this](int i) { worker_main(i); }, threads_);
  if (st.is_ok()) return st;
  const int got = static_cast<int>(threads_.size());
  if (got == 0) return st;
  std::fprintf(stderr, "chute: the loader runs with %d of the %d threads it asked for: %s\n", got, pool,
               st.message().c_str());
  std::lock_guard<std::mutex> lock(shared_->mu);
  options_.max_threads = got;
  if (options_.num_threads > got) options_.num_threads = got;
  tuner_ = Autotuner(tuner_settings(options_, writer_.sample_bytes()));
  shared_->work_cv.notify_all();
  return Status::ok();
}

Loader::~Loader() {
  if (fork_mark_.in_child()) {
    // The threads, and the locks and condition variables they used, are the parent's: leave them be.
    new std::vector<std::thread>(std::move(threads_));     // NOLINT: leaked on purpose, see fork.h
    new std::shared_ptr<SharedState>(std::move(shared_));  // NOLINT: likewise
    return;
  }
  close();
}

int64_t Loader::position() const {
  if (fork_mark_.in_child()) return 0;  // a forked child never locks: see fork.h
  std::lock_guard<std::mutex> lock(shared_->mu);
  return epoch_->consumed;
}

int64_t Loader::epoch_size() const { return EpochOrder::rank_size(source_->size(), options_.shard); }

int64_t Loader::num_batches() const {
  const int64_t n = epoch_size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void Loader::close() {
  if (fork_mark_.in_child()) return;  // nothing to stop here, and nothing here may be locked (fork.h)
  // One closer at a time, and every closer returns only once the threads are gone.
  std::lock_guard<std::mutex> closing(close_mu_);
  {
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (epoch_->stop) return;
    // Stop first: a consumer woken while the epoch is cancelled sees the loader closed, not an epoch end.
    epoch_->stop = true;
    shared_->consumer_cv.notify_all();
    cancel_epoch(lock);
  }
  shared_->work_cv.notify_all();
  shared_->consumer_cv.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // A closed loader never fills a buffer again: free them now, not when the loader object goes (held
  // batches keep theirs until released), and without the lock (cudaFreeHost synchronises the device).
  std::vector<BatchRing::Buffer> retired;
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->ring.close();
  retired = shared_->ring.take_retired();
}

int Loader::host_blocks_wanted() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->ring.memory_wanted();
}

size_t Loader::host_block_bytes() const { return shared_->ring.slot_bytes(); }  // fixed at construction

void Loader::host_blocks_added() {
  { std::lock_guard<std::mutex> lock(shared_->mu); }  // a worker between its check and its wait sees the blocks
  shared_->work_cv.notify_all();
  shared_->consumer_cv.notify_all();
}

// Ends the epoch in flight: waits for running tasks (one sample each), then returns its buffers.
void Loader::cancel_epoch(std::unique_lock<std::mutex>& lock) {
  EpochState& e = *epoch_;
  e.active = false;
  ++e.generation;
  e.reads->cancel();
  e.reads = CancelToken::make();
  shared_->consumer_cv.wait(lock, [&] { return e.in_flight == 0; });
  for (auto& [batch, slot] : e.batch_slot) shared_->ring.release(slot);
  for (auto& r : e.ready) shared_->ring.release(r.slot);
  e.batch_slot.clear();
  e.ready.clear();
  e.tasks.clear();
  e.batch_errors.clear();
  shared_->work_cv.notify_all();
}

Status Loader::start_epoch(uint64_t epoch, int64_t start) {
  // Both orders are pure functions of (seed, epoch, shard): a resumed epoch is the same order.
  auto order =
      options_.order == SampleOrder::kShards
          ? std::make_unique<EpochOrder>(shard_windows_, options_.shuffle, options_.seed, epoch, options_.shard)
          : std::make_unique<EpochOrder>(source_->size(), options_.shuffle, options_.seed, epoch, options_.shard);
  return begin_epoch({.seed = options_.seed, .epoch = epoch}, start, std::move(order));
}

Status Loader::start_epoch(uint64_t epoch, int64_t start, std::vector<int64_t> order, std::optional<uint64_t> seed) {
  const int64_t n = source_->size();
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] < 0 || order[k] >= n)
      return invalid_argument("index " + std::to_string(order[k]) + " (position " + std::to_string(k) +
                              " of the epoch's order) is out of range for a source of " + std::to_string(n) +
                              " samples");
  }
  return begin_epoch({.seed = seed.value_or(options_.seed), .epoch = epoch}, start,
                     std::make_unique<EpochOrder>(std::move(order)));
}

Status Loader::begin_epoch(EpochKey key, int64_t start, std::unique_ptr<EpochOrder> order) {
  if (start < 0 || start > order->size())
    return invalid_argument("resume position " + std::to_string(start) + " is outside this rank's epoch of " +
                            std::to_string(order->size()) + " samples");
  if (fork_mark_.in_child()) return fork_mark_.child_error("loader");
  source_->will_read(*order, start);       // before the workers start: remote shards are fetched from here on
  std::vector<BatchRing::Buffer> trimmed;  // freed after the lock (cudaFreeHost synchronises the device)
  {
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (epoch_->stop) return Status(StatusCode::kCancelled, "the loader is closed");
    cancel_epoch(lock);
    // Buffers the ring grew for batches a consumer kept, and has let go of since: freed, back to what
    // prefetch needs (a consumer that still holds them keeps them).
    shared_->ring.trim(tuner_.prefetch() + 2 + options_.extra_buffers);
    trimmed = shared_->ring.take_retired();
    options_.decode.budget->set_reserved(shared_->ring.slots_with_memory() * shared_->ring.slot_bytes());
    EpochState& e = *epoch_;
    e.epoch = key.epoch;
    e.seed = key.seed;
    e.order = std::move(order);
    e.next = e.frontier = e.start = e.consumed = start;
    e.failures = e.delivered = 0;
    e.max_target = -1;
    e.finished = start == e.order->size();
    e.failed.reset();
    e.active = true;
  }
  shared_->work_cv.notify_all();
  return Status::ok();
}

bool Loader::can_dispatch() const {
  const EpochState& e = *epoch_;
  if (!e.active || e.next >= e.order->size()) return false;
  const int64_t target = e.output_position(e.next);
  if (target <= e.max_target) return true;  // staged: bounded by the number of skipped samples
  const int64_t batch = target / options_.batch_size;
  if (batch >= e.delivered + tuner_.prefetch()) return false;
  return e.batch_slot.count(batch) > 0 || shared_->ring.can_acquire();
}

bool Loader::needs_new_slot() const {
  const EpochState& e = *epoch_;
  if (!e.active || e.next >= e.order->size()) return false;
  const int64_t target = e.output_position(e.next);
  if (target <= e.max_target) return false;  // staged
  const int64_t batch = target / options_.batch_size;
  return batch < e.delivered + tuner_.prefetch() && e.batch_slot.count(batch) == 0;
}

// A new ring slot, allocated without the lock: pinning a batch buffer (cudaHostAlloc) takes milliseconds
// and must not stall the consumer and the other workers. Called, and returns, with `lock` held.
void Loader::grow_ring(std::unique_lock<std::mutex>& lock) {
  EpochState& e = *epoch_;
  BatchRing& ring = shared_->ring;
  const int held = ring.num_slots() - ring.num_free() - static_cast<int>(e.batch_slot.size() + e.ready.size());
  ring.begin_growth();
  lock.unlock();
  std::optional<BatchRing::Buffer> memory;
  try {
    memory.emplace(ring.allocate_slot());
  } catch (const std::bad_alloc&) {
  }
  lock.lock();
  if (memory) {
    ring.finish_growth(std::move(*memory));
    // The buffers leave less of max_memory to large decodes.
    options_.decode.budget->set_reserved(ring.slots_with_memory() * ring.slot_bytes());
    if (!e.warned_growth) {
      e.warned_growth = true;
      std::fprintf(stderr,
                   "chute: the consumer is holding on to %d batches; growing the batch ring to %d buffers "
                   "(%.0f MB). Held tensors keep their buffers; clone() what you keep to avoid this.\n",
                   held, ring.num_slots(), ring.num_slots() * ring.slot_bytes() / 1e6);
    }
  } else {
    ring.abandon_growth();
  }
  shared_->work_cv.notify_all();
  shared_->consumer_cv.notify_all();
}

Loader::Task& Loader::dispatch() {
  EpochState& e = *epoch_;
  const int64_t position = e.next++;
  Task& t = e.tasks[position];  // std::map: the node stays put until finalised
  t.generation = e.generation;
  t.position = position;
  t.index = (*e.order)[t.position];
  const int64_t target = e.output_position(t.position);
  if (target <= e.max_target) {
    // A skipped sample moved later samples up: this position may still hold a sample waiting to move.
    try {
      t.staged.resize(writer_.sample_bytes());
      t.dst = t.staged.data();
    } catch (const std::bad_alloc&) {
      t.dst = nullptr;  // the worker reports it as this sample's error (out of memory), not a terminate
    }
  } else {
    e.max_target = t.target = target;
    const int64_t batch = target / options_.batch_size;
    auto it = e.batch_slot.find(batch);
    if (it == e.batch_slot.end()) {
      const int slot = shared_->ring.acquire();
      CHUTE_CHECK(slot >= 0);  // can_dispatch() said there was one
      it = e.batch_slot.emplace(batch, slot).first;
    }
    t.dst = shared_->ring.images(it->second) + (target % options_.batch_size) * writer_.sample_bytes();
  }
  return t;
}

void Loader::worker_main(int id) {
  pthread_setname_np(pthread_self(), "chute-worker");  // what top, py-spy and gdb show
  if (options_.cpu_affinity && !options_.cpu_affinity->empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : *options_.cpu_affinity) CPU_SET(cpu, &set);
    // Best effort: a CPU outside this process's cgroup makes it fail, and the thread then runs anywhere.
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  SampleProcessor processor(*source_, pipeline_, writer_, options_.decode);
  const bool timed = options_.collect_stats;
  // The thread's CPU clock is a system call (~1-4 us on VMs): read it every kCpuEvery samples, charging
  // everything the thread did since the last read (its waits use no CPU).
  constexpr int kCpuEvery = 4;
  int64_t processed = 0;
  double cpu_mark = timed ? thread_cpu_s() : 0;
  std::unique_lock<std::mutex> lock(shared_->mu);
  EpochState& e = *epoch_;
  for (;;) {
    // Idle time counts while this thread is active in a running epoch and waits for what it may start.
    const bool counted = timed && id < tuner_.threads() && e.active && !e.finished;
    const double idle_from = counted ? now_s() : 0;
    shared_->work_cv.wait(lock, [&] { return e.stop || (id < tuner_.threads() && can_dispatch()); });
    if (e.stop) return;
    if (counted) e.totals.worker_idle_s += now_s() - idle_from;
    if (needs_new_slot() && shared_->ring.wants_growth()) {
      grow_ring(lock);  // then look again: the new slot may have gone to another thread
      continue;
    }
    const EpochKey key{.seed = e.seed, .epoch = e.epoch};
    Task& task = dispatch();
    const uint64_t generation = task.generation;
    const int64_t index = task.index;
    void* dst = task.dst;
    ++e.in_flight;
    CancelScope reads(e.reads);
    lock.unlock();
    const int64_t warnings_before = processor.benign_warnings();
    StageTimes times;
    Status status = dst != nullptr ? processor.process(index, key, dst, timed ? &times : nullptr)
                                   : out_of_memory("for a sample staged behind a skipped one", writer_.sample_bytes());
    double cpu = 0;
    if (timed && ++processed % kCpuEvery == 0) {
      const double mark = thread_cpu_s();
      cpu = mark - cpu_mark;
      cpu_mark = mark;
    }
    lock.lock();
    e.decode_warnings += processor.benign_warnings() - warnings_before;
    --e.in_flight;
    e.totals.stages += times;
    e.totals.worker_cpu_s += cpu;
    ++e.totals.samples;
    const double finalise_from = timed ? now_s() : 0;
    const bool wake = generation == e.generation ? complete(task, std::move(status)) : false;
    if (timed) {
      const double now = now_s();
      e.totals.batch_s += now - finalise_from;
      tune(now);
    }
    if (wake || e.in_flight == 0) shared_->consumer_cv.notify_all();
  }
}

// Returns whether the consumer has something new: a batch, the end of the epoch, or an error.
bool Loader::complete(Task& task, Status status) {
  EpochState& e = *epoch_;
  const size_t ready_before = e.ready.size();
  task.done = true;
  task.status = std::move(status);
  const int64_t b = options_.batch_size;
  const size_t sample_bytes = writer_.sample_bytes();
  // Finalise in epoch order: place each sample at its final position, or record its error.
  for (auto it = e.tasks.find(e.frontier); it != e.tasks.end() && it->second.done; it = e.tasks.find(e.frontier)) {
    Task& t = it->second;
    if (t.status.is_ok()) {
      const int64_t pos = e.output_position(t.position);
      const int slot = e.batch_slot.at(pos / b);
      uint8_t* dst = shared_->ring.images(slot) + (pos % b) * sample_bytes;
      if (t.target < 0) {
        std::memcpy(dst, t.staged.data(), sample_bytes);
      } else if (t.target != pos) {
        std::memcpy(dst, shared_->ring.images(e.batch_slot.at(t.target / b)) + (t.target % b) * sample_bytes,
                    sample_bytes);
      }
      shared_->ring.labels(slot)[pos % b] = source_->label(t.index);
      if (pos % b == b - 1) push_ready(pos / b, b, t.position + 1);
    } else if (options_.on_error == ErrorPolicy::kRaise || t.status.code() == StatusCode::kEnvironment) {
      // The error takes the place of its batch, as an exception in torch's fetch does: the batch's other
      // samples are dropped, and the epoch goes on with the next batch, at its usual position. An
      // environment failure (out of descriptors, memory, ...: retried already) is no bad sample: it is
      // raised so under either policy, never skipped or recorded in errors().
      const int64_t pos = e.output_position(t.position);
      e.batch_errors.try_emplace(pos / b, FailedSample{t.index, source_->name(t.index), t.status, e.epoch});
      if (pos % b == b - 1) push_ready(pos / b, b, t.position + 1);
    } else {
      e.errors.push_back(FailedSample{t.index, source_->name(t.index), t.status, e.epoch});
      ++e.failures;
      shared_->work_cv.notify_all();  // later targets moved up: another batch may now be in the window
    }
    e.tasks.erase(it);
    ++e.frontier;
  }
  if (e.frontier == e.order->size()) {
    finish_epoch();
    shared_->work_cv.notify_all();  // buffers of empty batches were returned
    return true;
  }
  return e.ready.size() != ready_before;
}

void Loader::push_ready(int64_t batch, int64_t count, int64_t next_position) {
  EpochState& e = *epoch_;
  auto it = e.batch_slot.find(batch);
  CHUTE_CHECK(it != e.batch_slot.end());
  std::optional<FailedSample> error;
  if (auto failed = e.batch_errors.find(batch); failed != e.batch_errors.end()) {
    error = std::move(failed->second);
    e.batch_errors.erase(failed);
  }
  e.ready.push_back({it->second, count, next_position, std::move(error)});
  e.batch_slot.erase(it);
}

void Loader::finish_epoch() {
  EpochState& e = *epoch_;
  const int64_t kept = e.output_position(e.order->size()), b = options_.batch_size;
  if (kept % b != 0 && !options_.drop_last) push_ready(kept / b, kept % b, e.order->size());
  // Buffers taken for positions that skipped samples left empty.
  for (auto& [batch, slot] : e.batch_slot) shared_->ring.release(slot);
  e.batch_slot.clear();
  e.batch_errors.clear();  // errors in a last batch that drop_last drops: torch never fetches it either
  e.finished = true;
}

Result<std::shared_ptr<Batch>> Loader::next(std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  if (fork_mark_.in_child()) return fork_mark_.child_error("loader");
  std::unique_lock<std::mutex> lock(shared_->mu);
  EpochState& e = *epoch_;
  e.failed.reset();
  const bool timed = options_.collect_stats;
  const double entered = timed ? now_s() : 0;
  if (timed && e.last_delivery_s >= 0) {
    e.totals.consumer_s += entered - e.last_delivery_s;  // the consumer's own work on the last batch
    e.last_delivery_s = -1;
  }
  // Every return from here counts its time as waiting; before an epoch's first batch, as filling too.
  const bool filling = e.delivered == 0;
  auto waited = [&] {
    if (!timed) return 0.0;
    const double now = now_s();
    e.totals.wait_s += now - entered;
    if (filling) e.totals.fill_wait_s += now - entered;
    return now;
  };
  struct OnReturn {
    decltype(waited)& account;
    bool armed = true;
    ~OnReturn() {
      if (armed) account();
    }
  } on_return{waited};
  for (;;) {
    if (e.stop) return Status(StatusCode::kCancelled, "the loader is closed");
    if (!e.active) return std::shared_ptr<Batch>();
    if (!e.ready.empty() && e.ready.front().error) {
      // kRaise: this batch failed. The consumer gets its error; a next call goes on with the next batch.
      EpochState::Ready r = std::move(e.ready.front());
      e.ready.pop_front();
      ++e.delivered;  // its place in the prefetch window is used up, as a delivered batch's is
      e.consumed = r.next_position;
      shared_->ring.release(r.slot);
      e.failed = std::move(r.error);
      shared_->work_cv.notify_all();  // the prefetch window moved
      return Status(e.failed->status.code(), e.failed->to_string());
    }
    if (!e.ready.empty()) {
      const EpochState::Ready r = e.ready.front();
      e.totals.ready_sum += static_cast<int64_t>(e.ready.size());
      ++e.totals.next_calls;
      e.ready.pop_front();
      ++e.delivered;
      ++e.totals.batches;
      e.totals.samples_delivered += r.count;
      e.consumed = r.next_position;
      auto batch = std::make_shared<Batch>(shared_, r.slot, r.count);
      on_return.armed = false;
      if (timed) {
        e.last_delivery_s = waited();
        tune(e.last_delivery_s);
      }
      lock.unlock();
      shared_->work_cv.notify_all();  // the prefetch window moved
      return batch;
    }
    if (e.finished) {
      e.active = false;
      return std::shared_ptr<Batch>();
    }
    // Nothing ready, nothing running, and no buffer to start on: every buffer is held by the consumer.
    if (e.in_flight == 0 && !can_dispatch() && !shared_->ring.can_acquire() && !shared_->ring.growing() &&
        e.frontier == e.next) {
      const int held = shared_->ring.num_slots() - shared_->ring.num_free() - static_cast<int>(e.batch_slot.size());
      cancel_epoch(lock);
      return Status(StatusCode::kResourceExhausted,
                    "all " + std::to_string(shared_->ring.num_slots()) + " batch buffers are in use and " +
                        std::to_string(held) +
                        " of them are held by batches the consumer still references (e.g. stored in a list); "
                        "release them, keep copies (tensor.clone()), or raise max_ring_bytes (chute.Loader(..., "
                        "max_ring_bytes=...), " +
                        std::to_string(options_.max_ring_bytes) + " bytes now)");
    }
    if (!timeout) {
      shared_->consumer_cv.wait(lock);
    } else if (shared_->consumer_cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      return Status(StatusCode::kDeadlineExceeded, "no batch ready yet");
    }
  }
}

std::optional<FailedSample> Loader::failed_sample() const {
  if (fork_mark_.in_child()) return std::nullopt;
  std::lock_guard<std::mutex> lock(shared_->mu);
  return epoch_->failed;
}

int64_t Loader::decode_warnings() const {
  if (fork_mark_.in_child()) return 0;
  std::lock_guard<std::mutex> lock(shared_->mu);
  return epoch_->decode_warnings;
}

std::vector<FailedSample> Loader::errors(size_t first) const {
  if (fork_mark_.in_child()) return {};
  std::lock_guard<std::mutex> lock(shared_->mu);
  const auto& all = epoch_->errors;
  return {all.begin() + static_cast<std::ptrdiff_t>(std::min(first, all.size())), all.end()};
}

void Loader::tune(double now) {
  EpochState& e = *epoch_;
  const LoaderStats& t = e.totals;
  TunerObservation o;
  o.now_s = now;
  o.samples = t.samples;
  o.busy_s = (t.stages.read_ns + t.stages.decode_ns + t.stages.transform_ns) * 1e-9;
  o.idle_s = t.worker_idle_s;
  // Waiting for an epoch's first batch is the pipeline filling, whatever the thread count: not a signal.
  o.wait_s = t.wait_s - t.fill_wait_s;
  o.consumer_s = t.consumer_s;
  o.batches = t.batches;
  o.samples_delivered = t.samples_delivered;
  if (tuner_.observe(o)) shared_->work_cv.notify_all();  // more threads may work, or further ahead
}

int Loader::active_threads() const {
  if (fork_mark_.in_child()) return 0;
  std::lock_guard<std::mutex> lock(shared_->mu);
  return tuner_.threads();
}

int Loader::prefetch() const {
  if (fork_mark_.in_child()) return 0;
  std::lock_guard<std::mutex> lock(shared_->mu);
  return tuner_.prefetch();
}

LoaderStats Loader::stats() const {
  if (fork_mark_.in_child()) return {};
  std::lock_guard<std::mutex> lock(shared_->mu);
  const EpochState& e = *epoch_;
  LoaderStats s = e.totals;
  s.errors_skipped = static_cast<int64_t>(e.errors.size());
  s.decode_warnings = e.decode_warnings;
  s = minus(s, e.baseline);
  s.elapsed_s = now_s() - e.baseline_s;
  s.threads = num_threads();
  s.active_threads = tuner_.threads();
  s.prefetch = tuner_.prefetch();
  s.max_prefetch = tuner_.prefetch_limit();
  s.auto_threads = options_.num_threads == 0;
  s.auto_prefetch = options_.prefetch == 0;
  s.slot_bytes = shared_->ring.slot_bytes();
  s.ring_slots = shared_->ring.slots_with_memory();  // buffers allocated (not slots whose memory went)
  s.cores = available_cores();
  s.process_cpu_s = process_cpu_s() - e.baseline_cpu_s;
  return s;
}

Loader::RingUsage Loader::ring_usage() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  const BatchRing& ring = shared_->ring;
  const int engine = static_cast<int>(epoch_->batch_slot.size() + epoch_->ready.size());
  return {ring.num_slots() - ring.num_free() - engine, ring.max_slots()};
}

void Loader::reset_stats() {
  if (fork_mark_.in_child()) return;
  std::lock_guard<std::mutex> lock(shared_->mu);
  EpochState& e = *epoch_;
  e.baseline = e.totals;
  e.baseline.errors_skipped = static_cast<int64_t>(e.errors.size());
  e.baseline.decode_warnings = e.decode_warnings;
  e.baseline_s = now_s();
  e.baseline_cpu_s = process_cpu_s();
}

}  // namespace chute
