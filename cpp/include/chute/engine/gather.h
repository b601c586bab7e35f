// Gatherer: batches of rows copied out of in-memory arrays (the tensor-dataset fast path).
//
//   index batch --submit()--> job (validated, output buffers taken from the BufferPool)
//   --pool threads "chute-gather", one chunk of rows each--> memcpy rows into the outputs --wait()--> consumer
//
// A dataset of row-contiguous columns (a TensorDataset's tensors, numpy arrays) is described once by its
// columns' base pointers and row sizes. Each submitted batch of indices becomes a job: one fresh output
// buffer per column, filled row by row with memcpy. A large job is split into chunks of at least
// `min_chunk_bytes` so every pool thread copies part of it; the thread that waits for a job copies its
// remaining chunks too, so a small batch costs no thread hand-off. Jobs run in submission order and the
// consumer may submit several ahead (prefetch): it waits only when gathering is slower than its own work.
//
// Errors travel with their job: an index outside [-rows, rows) fails that batch (wait() returns it, with
// the index and the dataset length), not the submission, so a consumer sees every earlier batch first.
//
// Output buffers are owned through shared_ptr: the consumer may keep them as long as it likes. When the
// last reference goes (on any thread, also after the Gatherer is gone) the memory returns to a
// BufferPool, which keeps up to `max_free_bytes` of freed buffers for reuse: a reused buffer is already
// faulted in, where a fresh 40 MB allocation is mmap'ed and zero-filled by the kernel page by page.
//
// Threads are named "chute-gather" before they copy anything (thread.h). When the kernel refuses some (a
// pids limit, ulimit -v), the gatherer runs with those it got, even none, and says so once on stderr: the
// waiting consumer copies the chunks no thread takes. In a process forked from the one that made it, the
// gatherer is inert (fork.h): submit()/wait() fail, park()/close() return at once.
//
// Thread-safety: submit()/wait() from one consumer thread; park()/close() from any thread, also several
// at once; buffers released on any thread.
// The column memory must stay valid and unchanged until every job that reads it has been waited for
// (or until close() returns).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "chute/base/fork.h"
#include "chute/base/status.h"

namespace chute {

// One column of a dataset: `rows` rows of `row_bytes` bytes each, back to back from `data`.
struct GatherColumn {
  const void* data = nullptr;
  int64_t row_bytes = 0;
  int64_t rows = 0;
};

struct GatherOptions {
  int num_threads = 0;                       // pool threads; 0: one per core this process may run on
  size_t min_chunk_bytes = size_t{1} << 20;  // a job is split into chunks of at least this many bytes
  size_t max_free_bytes = size_t{1} << 30;   // freed output buffers kept for reuse
};

// Free output buffers, by size, for reuse. Shared by the Gatherer and every buffer it handed out.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  explicit BufferPool(size_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}
  ~BufferPool();
  // A buffer of at least `bytes` (64-byte aligned) that returns here when its last reference goes;
  // nullptr when memory is exhausted.
  std::shared_ptr<uint8_t> acquire(size_t bytes);
  size_t free_bytes() const;
  int64_t allocations() const;  // buffers allocated (not reused) so far

 private:
  void release(uint8_t* p, size_t bytes);
  mutable std::mutex mu_;
  size_t max_free_bytes_;
  size_t free_bytes_ = 0;                 // guarded by mu_
  int64_t allocations_ = 0;               // guarded by mu_
  std::multimap<size_t, uint8_t*> free_;  // guarded by mu_
};

// A finished job: one buffer per column, holding `rows` rows; or, with `status` not ok, the error that
// failed it (its data error: the job's own, delivered in its turn).
struct GatherBatch {
  int64_t rows = 0;
  std::vector<std::shared_ptr<uint8_t>> columns;
  Status status;
  std::optional<int64_t> bad_index;  // the first index out of range, when that is what failed it
};

class Gatherer {
 public:
  static Result<std::unique_ptr<Gatherer>> create(std::vector<GatherColumn> columns, GatherOptions options = {});
  ~Gatherer();
  Gatherer(const Gatherer&) = delete;
  Gatherer& operator=(const Gatherer&) = delete;

  int64_t rows() const { return rows_; }
  int64_t row_bytes(size_t column) const { return columns_[column].row_bytes; }
  int num_threads() const {  // running now (0 while parked, and in a forked child)
    if (fork_mark_.in_child()) return 0;
    std::lock_guard<std::mutex> lock(threads_mu_);
    return static_cast<int>(threads_.size());
  }
  const BufferPool& pool() const { return *pool_; }

  // Queues one batch; returns its ticket (tickets count up from 0). Fails only when the gatherer is
  // closed or memory is exhausted; bad indices fail the job instead (see wait()).
  Result<int64_t> submit(std::span<const int64_t> indices);
  // The job's result, once every row is copied (a bad index: the batch's status says so). The Result
  // itself fails only for the gatherer: kDeadlineExceeded when a `timeout` passed first (retry),
  // kCancelled after close(), kInvalidArgument for an unknown ticket. Each ticket is waited for once.
  Result<GatherBatch> wait(int64_t ticket, std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Lets the copy threads finish the queued jobs and exit; the next submit() starts them again. Between
  // epochs this leaves no native thread behind, so a process that forks (DataLoader workers) while a
  // gatherer sits idle has nothing to lose. Idempotent; a no-op after close().
  void park();
  // Finishes the jobs already running, drops the queued ones, stops the threads. Idempotent.
  void close();

 private:
  struct Job;
  Gatherer(std::vector<GatherColumn> columns, GatherOptions options);
  void worker_main();
  void start_threads();  // the consumer's thread, when none run
  // Copies chunk `chunk` of `job` (outside the lock) and accounts for it (under it).
  void run_chunk(Job& job, int64_t chunk, std::unique_lock<std::mutex>& lock);

  std::vector<GatherColumn> columns_;
  int64_t rows_ = 0;
  int64_t row_bytes_ = 0;  // all columns together
  GatherOptions options_;
  std::shared_ptr<BufferPool> pool_;
  std::mutex mu_;
  std::condition_variable work_cv_;               // workers: a chunk to take, or stop
  std::condition_variable done_cv_;               // consumer: a job finished
  bool stop_ = false;                             // guarded by mu_
  bool parking_ = false;                          // guarded by mu_: threads exit once the queue is empty
  int64_t next_ticket_ = 0;                       // guarded by mu_
  std::deque<std::shared_ptr<Job>> queue_;        // jobs with chunks not yet taken; guarded by mu_
  std::map<int64_t, std::shared_ptr<Job>> jobs_;  // ticket -> job, until waited for; guarded by mu_
  mutable std::mutex threads_mu_;     // start_threads/park/close: one at a time, from whichever thread calls them
  std::vector<std::thread> threads_;  // guarded by threads_mu_
  bool warned_threads_ = false;       // guarded by threads_mu_: a shortfall of threads was reported
  ForkMark fork_mark_;
};

}  // namespace chute
