#include "chute/engine/gather.h"

#include "chute/base/cores.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "chute/base/fork_gate.h"
#include "chute/base/thread.h"

namespace chute {
namespace {

constexpr size_t kAlign = 64;
// Buffers of at least this size are aligned to and sized in huge pages, and marked MADV_HUGEPAGE: where
// transparent huge pages are "madvise" (a common default), that turns 512 TLB entries into one.
constexpr size_t kHugePage = size_t{2} << 20;

size_t rounded(size_t bytes) {
  const size_t align = bytes >= 2 * kHugePage ? kHugePage : kAlign;
  return std::max(align, (bytes + align - 1) / align * align);
}

uint8_t* allocate(size_t size) {
  const bool huge = size % kHugePage == 0;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(huge ? kHugePage : kAlign, size));
  if (p != nullptr && huge) madvise(p, size, MADV_HUGEPAGE);  // a hint: failure changes nothing
  return p;
}

}  // namespace

// ---- BufferPool ----------------------------------------------------------------------------------

BufferPool::~BufferPool() {
  for (auto& [bytes, p] : free_) std::free(p);
}

std::shared_ptr<uint8_t> BufferPool::acquire(size_t bytes) {
  const size_t size = rounded(bytes);
  uint8_t* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);  // exact size: a dataset's batches all have one size (the last aside)
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
      free_bytes_ -= size;
    } else {
      ++allocations_;
    }
  }
  if (p == nullptr) p = allocate(size);
  if (p == nullptr) return nullptr;
  // The deleter keeps the pool alive: a batch may outlive the Gatherer that made it.
  return std::shared_ptr<uint8_t>(p, [pool = shared_from_this(), size](uint8_t* q) { pool->release(q, size); });
}

void BufferPool::release(uint8_t* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_bytes_ + bytes <= max_free_bytes_) {
      free_.emplace(bytes, p);
      free_bytes_ += bytes;
      return;
    }
  }
  std::free(p);
}

size_t BufferPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

int64_t BufferPool::allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_;
}

// ---- Gatherer ------------------------------------------------------------------------------------

struct Gatherer::Job {
  std::vector<int64_t> indices;   // normalised to [0, rows)
  std::vector<uint8_t*> outputs;  // one per column, inside result.columns
  GatherBatch result;
  int64_t chunk_rows = 1;
  int64_t num_chunks = 0;
  int64_t next_chunk = 0;   // guarded by the gatherer's mu_
  int64_t chunks_done = 0;  // guarded by the gatherer's mu_
  bool done = false;        // guarded by the gatherer's mu_
};

Result<std::unique_ptr<Gatherer>> Gatherer::create(std::vector<GatherColumn> columns, GatherOptions options) {
  if (columns.empty()) return invalid_argument("a gatherer needs at least one column");
  const int64_t rows = columns[0].rows;
  for (size_t c = 0; c < columns.size(); ++c) {
    const GatherColumn& col = columns[c];
    if (col.rows != rows)
      return invalid_argument("column " + std::to_string(c) + " has " + std::to_string(col.rows) +
                              " rows, column 0 has " + std::to_string(rows) +
                              ": every column needs one row per sample");
    if (col.rows < 0 || col.row_bytes < 0)
      return invalid_argument("column " + std::to_string(c) + " has a negative size");
    if (col.data == nullptr && col.rows > 0 && col.row_bytes > 0)
      return invalid_argument("column " + std::to_string(c) + " has no data");
  }
  if (options.num_threads < 0) return invalid_argument("num_threads must be positive, or 0 for one per core");
  if (options.min_chunk_bytes == 0) return invalid_argument("min_chunk_bytes must be positive");
  return std::unique_ptr<Gatherer>(new Gatherer(std::move(columns), options));
}

Gatherer::Gatherer(std::vector<GatherColumn> columns, GatherOptions options)
    : columns_(std::move(columns)), options_(options), pool_(std::make_shared<BufferPool>(options.max_free_bytes)) {
  rows_ = columns_[0].rows;
  for (const GatherColumn& c : columns_) row_bytes_ += c.row_bytes;
  std::lock_guard<std::mutex> threads_lock(threads_mu_);
  start_threads();
}

void Gatherer::start_threads() {
  const int n = options_.num_threads > 0 ? options_.num_threads : available_cores();
  const Status st = chute::start_threads(
      "chute-gather", 0, n, [this](int) { worker_main(); }, threads_);
  // Fewer threads (even none) only make copies slower: the consumer copies the chunks no thread took.
  if (!st.is_ok() && !warned_threads_) {
    warned_threads_ = true;
    std::fprintf(stderr, "chute: the tensor gather runs with %zu of the %d threads it asked for: %s\n", threads_.size(),
                 n, st.message().c_str());
  }
}

void Gatherer::park() {
  if (fork_mark_.in_child()) return;
  std::lock_guard<std::mutex> threads_lock(threads_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || threads_.empty()) return;
    parking_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();  // each finishes the queue first: no job is left without a thread
  threads_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  parking_ = false;
}

Gatherer::~Gatherer() {
  if (fork_mark_.in_child()) {
    // The parent's threads are not here: never join them, and never destroy what they may have held or
    // waited on (glibc's pthread_cond_destroy waits for every waiter to leave). See fork.h.
    new std::vector<std::thread>(std::move(threads_));  // NOLINT: leaked on purpose
    new (&work_cv_) std::condition_variable();
    new (&done_cv_) std::condition_variable();
    new (&mu_) std::mutex();
    new (&threads_mu_) std::mutex();
    return;
  }
  close();
}

void Gatherer::close() {
  if (fork_mark_.in_child()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;    // a second closer goes on to wait for the joins, below, so it too returns after them
    queue_.clear();  // chunks not taken are dropped; their jobs never finish (wait() says cancelled)
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  std::lock_guard<std::mutex> threads_lock(threads_mu_);
  for (auto& t : threads_) t.join();  // a thread finishes the chunk it copies: no write after this
  threads_.clear();
}

Result<int64_t> Gatherer::submit(std::span<const int64_t> indices) {
  if (fork_mark_.in_child()) return fork_mark_.child_error("gatherer");
  int64_t running = 0;
  {
    std::lock_guard<std::mutex> threads_lock(threads_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return Status(StatusCode::kCancelled, "the gatherer is closed");
    }
    if (threads_.empty()) start_threads();  // parked since the last epoch
    running = static_cast<int64_t>(threads_.size());
  }
  auto job = std::make_shared<Job>();
  const int64_t n = static_cast<int64_t>(indices.size());
  job->indices.resize(indices.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t index = indices[i];
    if (index < -rows_ || index >= rows_) {  // negative indices count from the end, as tensor[i] does
      job->result.bad_index = index;
      job->result.status =
          Status(StatusCode::kInvalidArgument, "index " + std::to_string(index) + " is out of range for a dataset of " +
                                                   std::to_string(rows_) + " samples");
      break;
    }
    job->indices[i] = index < 0 ? index + rows_ : index;
  }
  if (job->result.status.is_ok()) {
    job->result.rows = n;
    for (const GatherColumn& c : columns_) {
      std::shared_ptr<uint8_t> buffer = pool_->acquire(static_cast<size_t>(n * c.row_bytes));
      if (buffer == nullptr)
        return Status(StatusCode::kResourceExhausted, "out of memory for a batch of " + std::to_string(n) + " rows");
      job->outputs.push_back(buffer.get());
      job->result.columns.push_back(std::move(buffer));
    }
    if (n > 0) {
      const int64_t per_row = std::max<int64_t>(1, row_bytes_);
      job->chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(options_.min_chunk_bytes) / per_row);
      // Enough chunks for every thread (and the waiting consumer) when the batch is large.
      const int64_t parts = std::min<int64_t>(n, running + 1);
      if (n * per_row >= static_cast<int64_t>(options_.min_chunk_bytes) * parts)
        job->chunk_rows = std::min(job->chunk_rows, (n + parts - 1) / parts);
      job->num_chunks = (n + job->chunk_rows - 1) / job->chunk_rows;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return Status(StatusCode::kCancelled, "the gatherer is closed");
  const int64_t ticket = next_ticket_++;
  jobs_.emplace(ticket, job);
  if (job->num_chunks == 0) {
    job->done = true;
  } else {
    queue_.push_back(job);
    work_cv_.notify_all();
  }
  return ticket;
}

void Gatherer::run_chunk(Job& job, int64_t chunk, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  const int64_t begin = chunk * job.chunk_rows;
  const int64_t end = std::min<int64_t>(begin + job.chunk_rows, static_cast<int64_t>(job.indices.size()));
  const ForkGate::Work work;  // a fork waits for the chunk's copies (fork_gate.h)
  for (size_t c = 0; c < columns_.size(); ++c) {
    const size_t rb = static_cast<size_t>(columns_[c].row_bytes);
    const uint8_t* src = static_cast<const uint8_t*>(columns_[c].data);
    uint8_t* dst = job.outputs[c] + static_cast<size_t>(begin) * rb;
    for (int64_t r = begin; r < end; ++r, dst += rb)
      std::memcpy(dst, src + static_cast<size_t>(job.indices[r]) * rb, rb);
  }
  lock.lock();
  if (++job.chunks_done == job.num_chunks) {
    job.done = true;
    done_cv_.notify_all();
  }
}

void Gatherer::worker_main() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || parking_ || !queue_.empty(); });
    if (stop_ || queue_.empty()) return;        // closed, or parked with nothing left to copy
    std::shared_ptr<Job> job = queue_.front();  // keeps the job alive while its chunk runs
    const int64_t chunk = job->next_chunk++;
    if (job->next_chunk == job->num_chunks) queue_.pop_front();
    run_chunk(*job, chunk, lock);
  }
}

Result<GatherBatch> Gatherer::wait(int64_t ticket, std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  if (fork_mark_.in_child()) return fork_mark_.child_error("gatherer");
  std::unique_lock<std::mutex> lock(mu_);
  auto it = jobs_.find(ticket);
  if (it == jobs_.end()) return invalid_argument("no job with ticket " + std::to_string(ticket) + " is pending");
  std::shared_ptr<Job> job = it->second;
  for (;;) {
    if (job->done) break;
    if (stop_) return Status(StatusCode::kCancelled, "the gatherer is closed");
    if (job->next_chunk < job->num_chunks) {  // copy a chunk here rather than sleep
      const int64_t chunk = job->next_chunk++;
      if (job->next_chunk == job->num_chunks) {
        auto queued = std::find(queue_.begin(), queue_.end(), job);
        CHUTE_CHECK(queued != queue_.end());  // a job with chunks left to take is queued
        queue_.erase(queued);
      }
      run_chunk(*job, chunk, lock);
      continue;
    }
    if (!timeout) {
      done_cv_.wait(lock);
    } else if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout && !job->done) {
      return Status(StatusCode::kDeadlineExceeded, "the batch is not gathered yet");
    }
  }
  jobs_.erase(ticket);
  return std::move(job->result);
}

}  // namespace chute
