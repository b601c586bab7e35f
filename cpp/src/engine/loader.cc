// The Loader's life and its thread pool: create() (options checked, the ring sized within max_memory),
// the workers' loop, the ring's growth for batches a consumer keeps, tuning and statistics, close(). The
// epochs, dispatch and in-order finalising are loader_epoch.cc's.
#include "chute/engine/loader.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>
#include <optional>
#include <string>

#include "chute/base/cancel.h"
#include "chute/base/cores.h"
#include "chute/base/environment.h"
#include "chute/base/fork.h"
#include "chute/base/fork_gate.h"
#include "chute/base/thread.h"
#include "chute/engine/batch_ring.h"
#include "chute/engine/processor.h"
#include "engine/detail/loader_state.h"

namespace chute {

using detail::now_s;

// Called with shared->mu held: the ring's slot table may grow on other threads.
Batch::Batch(std::shared_ptr<SharedState> shared, int slot, int64_t size, MixParams mix)
    : shared_(std::move(shared)),
      slot_(slot),
      size_(size),
      images_(shared_->ring.images(slot)),
      labels_(shared_->ring.labels(slot)),
      mix_(mix) {}

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

namespace {
constexpr int kMaxThreads = 4096;

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

// `source_memory`: the share of max_memory the source keeps (source_share); the ring gets the rest.
TunerSettings tuner_settings(const LoaderOptions& o, size_t sample_bytes, size_t source_memory) {
  TunerSettings t;
  t.max_threads = o.max_threads;
  t.tune_threads = o.num_threads == 0;
  t.threads = o.num_threads == 0 ? o.max_threads : o.num_threads;  // auto starts with every thread
  t.tune_prefetch = o.prefetch == 0;
  t.prefetch = o.prefetch;
  t.batch_size = o.batch_size;
  t.slot_bytes = o.host_allocator->footprint(slot_bytes_for(o.batch_size, sample_bytes));
  t.max_memory = o.max_memory - source_memory;
  t.reserved_buffers = 2 + o.extra_buffers;
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

// The share of max_memory a source keeps for its own reads (a remote dataset's shards in memory:
// Source::memory_wanted): between what it needs at least and what it wants, at most half of what prefetch
// 1's ring leaves unless it needs more; 0 for a source that keeps none.
Result<size_t> source_share(const Source& source, const LoaderOptions& o, size_t sample_bytes) {
  const int64_t window = o.order == SampleOrder::kShards ? o.shard_window : 0;
  const SourceMemory m = source.memory_wanted(window);
  if (m.wanted == 0) return size_t{0};
  const size_t slot = o.host_allocator->footprint(slot_bytes_for(o.batch_size, sample_bytes));
  const size_t ring = static_cast<size_t>(3 + o.extra_buffers) * slot;
  const size_t rest = o.max_memory > ring ? o.max_memory - ring : 0;
  if (m.least > rest) {
    const double mib = 1 << 20;
    char text[512];
    std::snprintf(text, sizeof text,
                  "max_memory of %.0f MiB (%zu bytes) does not hold both prefetch 1's batch buffers (%.0f MiB) and "
                  "the %.0f MiB the %s keeps in memory to read %s (docs/REMOTE.md): raise max_memory, or lower "
                  "%s or batch_size",
                  o.max_memory / mib, o.max_memory, ring / mib, m.least / mib, source_kind(source).c_str(),
                  window > 0 ? "two windows of its shards" : "its shards", window > 0 ? "shard_window" : "prefetch");
    return invalid_argument(text);
  }
  return std::min<size_t>(m.wanted, std::max<size_t>(m.least, rest / 2));
}

// An explicit prefetch whose ring does not fit max_memory is lowered to what fits (Autotuner::max_prefetch,
// auto prefetch's limit too); the notice says so, with the sizes, for the caller to show once.
std::optional<std::string> fit_prefetch(LoaderOptions& o, const TunerSettings& t) {
  const int fits = Autotuner::max_prefetch(t);
  if (o.prefetch == 0 || o.prefetch <= fits) return std::nullopt;
  char text[512];
  const double mib = 1 << 20;
  const int extra = t.reserved_buffers - 2;
  const std::string in_flight = extra > 0 ? " + " + std::to_string(extra) + " for copies to the device" : "";
  std::snprintf(text, sizeof text,
                "prefetch=%d needs %.0f MiB of batch buffers (%d + 2%s, of %.1f MiB each), more than "
                "max_memory=%zu bytes (%.0f MiB) holds: using prefetch=%d. Raise max_memory to keep prefetch=%d.",
                o.prefetch, static_cast<double>(o.prefetch + t.reserved_buffers) * t.slot_bytes / mib, o.prefetch,
                in_flight.c_str(), t.slot_bytes / mib, o.max_memory, o.max_memory / mib, fits, o.prefetch);
  o.prefetch = fits;
  return std::string(text);
}
}  // namespace

Result<std::unique_ptr<Loader>> Loader::create(std::shared_ptr<const Source> source, Pipeline pipeline,
                                               LoaderOptions options, std::optional<BatchMix> mix) {
  if (source == nullptr) return invalid_argument("source is null");
  CHUTE_RETURN_IF_ERROR(options.validate());
  if (mix) CHUTE_RETURN_IF_ERROR(mix->check_format(options.output));
  CHUTE_ASSIGN_OR_RETURN(LoaderOrder order, LoaderOrder::create(*source, options));
  // A pool of tens of thousands of threads would start (the kernel allows it), then crawl: not a budget.
  if (std::max(options.num_threads, options.max_threads) > kMaxThreads)
    return invalid_argument("num_threads/max_threads of " +
                            std::to_string(std::max(options.num_threads, options.max_threads)) + " exceeds " +
                            std::to_string(kMaxThreads) + " threads; about one per core is enough (" +
                            std::to_string(available_cores()) + " here)");
  CHUTE_ASSIGN_OR_RETURN(OutputWriter writer, OutputWriter::create(pipeline.out_height(), pipeline.out_width(),
                                                                   options.output, pipeline.normalize()));
  if (options.max_threads == 0) options.max_threads = options.num_threads > 0 ? options.num_threads : available_cores();
  CHUTE_RETURN_IF_ERROR(BatchRing::check_size(options.batch_size, writer.sample_bytes(),
                                              int64_t{std::max(options.prefetch, 1)} + 2 + options.extra_buffers));
  // Every buffer of the ring lies within max_memory, whatever the prefetch: prefetch 1's ring must fit,
  // and an explicit prefetch is lowered to what fits, as auto prefetch never goes beyond it.
  // A remote dataset's shards in memory come out of max_memory first.
  CHUTE_ASSIGN_OR_RETURN(const size_t source_memory, source_share(*source, options, writer.sample_bytes()));
  const TunerSettings budget = tuner_settings(options, writer.sample_bytes(), source_memory);
  CHUTE_RETURN_IF_ERROR(Autotuner::check_memory(budget));
  std::optional<std::string> lowered = fit_prefetch(options, budget);
  // Large decodes share max_memory with the batch buffers (decode_budget.h).
  if (!options.decode.budget)
    options.decode.budget = std::make_shared<DecodeBudget>(options.max_memory - source_memory);
  if (source_memory > 0)
    source->set_memory(source_memory, options.order == SampleOrder::kShards ? options.shard_window : 0);
  std::unique_ptr<Loader> loader(new Loader(std::move(source), std::move(pipeline), std::move(writer), options,
                                            std::move(order), std::move(mix), source_memory));
  if (lowered) loader->notices_.push_back(std::move(*lowered));
  CHUTE_RETURN_IF_ERROR(loader->start_workers());
  return loader;
}

Loader::Loader(std::shared_ptr<const Source> source, Pipeline pipeline, OutputWriter writer, LoaderOptions options,
               LoaderOrder order, std::optional<BatchMix> mix, size_t source_memory)
    : source_(std::move(source)),
      order_(std::move(order)),
      pipeline_(std::move(pipeline)),
      writer_(std::move(writer)),
      options_(options),
      mix_(std::move(mix)),
      source_memory_(source_memory),
      epoch_(std::make_unique<EpochState>()),
      tuner_(tuner_settings(options_, writer_.sample_bytes(), source_memory_)) {
  shared_ = std::make_shared<SharedState>(options_.batch_size, writer_.sample_bytes(),
                                          tuner_.prefetch() + 2 + options_.extra_buffers, options_.max_ring_bytes,
                                          options_.host_allocator);
  options_.decode.budget->set_reserved(shared_->ring.slots_with_memory() * shared_->ring.slot_footprint());
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
  tuner_ = Autotuner(tuner_settings(options_, writer_.sample_bytes(), source_memory_));
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
    options_.decode.budget->set_reserved(ring.slots_with_memory() * ring.slot_footprint());
    if (!e.warned_growth) {
      e.warned_growth = true;
      std::fprintf(stderr,
                   "chute: the consumer is holding on to %d batches; growing the batch ring to %d buffers "
                   "(%.0f MB). Held tensors keep their buffers; clone() what you keep to avoid this.\n",
                   held, ring.num_slots(), ring.num_slots() * ring.slot_footprint() / 1e6);
    }
  } else {
    ring.abandon_growth();
  }
  shared_->work_cv.notify_all();
  shared_->consumer_cv.notify_all();
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
    shared_->work_cv.wait(lock,
                          [&] { return e.stop || (id < tuner_.threads() && (!e.mixing.empty() || can_dispatch())); });
    if (e.stop) return;
    if (counted) e.totals.worker_idle_s += now_s() - idle_from;
    if (!e.mixing.empty()) {  // a finished batch's transform first: the consumer may be waiting for it
      run_mix(lock);
      continue;
    }
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

void Loader::run_mix(std::unique_lock<std::mutex>& lock) {
  EpochState& e = *epoch_;
  const MixTask task = e.mixing.front();
  e.mixing.pop_front();
  ++e.in_flight;  // an epoch cancelled meanwhile waits for this part before it returns the slot
  uint8_t* images = shared_->ring.images(task.slot);
  lock.unlock();
  const auto start = std::chrono::steady_clock::now();
  {
    const ForkGate::Work work;
    apply_batch_mix(task.params,
                    {.batch = task.count, .height = out_height(), .width = out_width(), .format = options_.output},
                    images, task.part, task.parts);
  }
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  lock.lock();
  --e.in_flight;
  e.totals.stages.transform_ns += ns;  // a batch transform is transform time, as a sample's is
  if (task.generation == e.generation) {
    for (EpochState::Ready& r : e.ready) {
      if (r.slot == task.slot && r.mix_parts_left > 0 && --r.mix_parts_left == 0) shared_->consumer_cv.notify_all();
    }
  }
  if (e.in_flight == 0) shared_->consumer_cv.notify_all();  // a cancel may wait for it
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
  s.slot_footprint = shared_->ring.slot_footprint();
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
