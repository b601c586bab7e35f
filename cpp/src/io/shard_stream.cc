#include "chute/io/shard_stream.h"

#include <algorithm>
#include <chrono>

#include "chute/base/fork_gate.h"
#include "chute/base/thread.h"

namespace chute {

const char* cache_policy_name(CachePolicy policy) { return policy == CachePolicy::kNone ? "none" : "disk"; }

Result<CachePolicy> parse_cache_policy(std::string_view name) {
  if (name == "none") return CachePolicy::kNone;
  if (name == "disk") return CachePolicy::kDisk;
  return invalid_argument("cache must be 'none' or 'disk', got '" + std::string(name) + "'");
}

Result<std::shared_ptr<ShardStream>> ShardStream::create(std::shared_ptr<ObjectStore> store,
                                                         std::shared_ptr<ShardCache> cache,
                                                         std::vector<StreamedShard> shards, Check check,
                                                         Options options) {
  if (options.fetch_threads < 1) return invalid_argument("shard stream: fetch_threads must be at least 1");
  auto s = std::shared_ptr<ShardStream>(new ShardStream());
  s->store_ = std::move(store);
  s->cache_ = std::move(cache);
  s->shards_ = std::move(shards);
  s->check_ = std::move(check);
  s->options_ = options;
  uint64_t largest = 1;
  for (const StreamedShard& shard : s->shards_) largest = std::max(largest, shard.object.size);
  ShardStream* p = s.get();
  // A buffer given back wakes whoever waits for one (no lock of ours is taken there: it may run under mu_).
  s->pool_ = BufferPool::create(largest, 1, [p] { p->cv_.notify_all(); });
  s->set_memory_limit(options.memory_bytes, 1);
  const size_t n = s->shards_.size();
  s->resident_.resize(n);
  s->fetching_.resize(n);
  s->versions_.reserve(n);
  for (const StreamedShard& shard : s->shards_) s->versions_.push_back(shard.object);
  s->last_use_.resize(n);
  s->touched_.resize(n);
  s->planned_.resize(n);
  // Named threads (top -H, py-spy); a thread the kernel refuses is an error here, never std::terminate
  // (the destructor stops and joins those already started).
  CHUTE_ASSIGN_OR_RETURN(std::thread walker, start_thread("chute-walk", [p] { p->walk_loop(); }));
  s->threads_.push_back(std::move(walker));
  CHUTE_RETURN_IF_ERROR(start_threads(
      "chute-fetch", 0, options.fetch_threads, [p](int) { p->fetch_loop(); }, s->threads_));
  return s;
}

ShardStream::~ShardStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  prefetch_cancel_->cancel();  // downloads in flight end within ~0.1 s, whatever the server does
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ShardStream::set_memory_limit(uint64_t bytes, int working_shards) const {
  const uint64_t buffers = std::max<uint64_t>(1, bytes / pool_->buffer_bytes());
  const int limit = static_cast<int>(std::min<uint64_t>(buffers, std::max<size_t>(shards_.size(), 1)));
  pool_->set_limit(limit);
  {
    std::lock_guard<std::mutex> lock(mu_);
    working_ = std::max(1, working_shards);
    // A lower limit takes effect now: the least recently used shards no reader holds leave memory (their
    // buffers are unmapped as they come back beyond the limit), not only as later fetches need buffers.
    for (;;) {
      int64_t victim = -1;
      for (uint32_t s = 0; s < resident_.size(); ++s)
        if (resident_[s] && resident_[s].use_count() == 1 && (victim < 0 || last_use_[s] < last_use_[victim]))
          victim = s;
      if (victim < 0 || pool_->allocated() <= limit) break;
      resident_[victim].reset();
    }
  }
  cv_.notify_all();  // the walker may go further ahead
}

uint64_t ShardStream::memory_limit() const { return static_cast<uint64_t>(pool_->limit()) * pool_->buffer_bytes(); }

int ShardStream::ahead_limit() const { return std::max(1, pool_->limit() - working_); }

Status ShardStream::failure(uint32_t i, const Status& fetch_status) const {
  return environment_error("fetching shard " + object_display_name(shards_[i].object.url) + ": " +
                           fetch_status.to_string());
}

std::shared_ptr<PageBuffer> ShardStream::take_buffer(std::unique_lock<std::mutex>& lock, uint32_t for_shard,
                                                     bool reader) const {
  for (;;) {
    if (stop_ || (reader && CancelScope::cancelled())) return nullptr;
    Result<std::shared_ptr<PageBuffer>> taken = pool_->try_take();
    if (taken.is_ok() && *taken) return std::move(taken).value();
    // Take one back: from the least recently used shard in memory that no reader holds now. The
    // prefetcher never takes one queued ahead and untouched (it would undo its own work); a reader takes
    // those last.
    int64_t victim = -1;
    bool victim_ahead = true;
    for (uint32_t s = 0; s < resident_.size(); ++s) {
      if (!resident_[s] || s == for_shard || resident_[s].use_count() > 1) continue;
      const bool ahead = planned_[s] && !touched_[s];
      if (ahead && !reader) continue;
      if (victim < 0 || (victim_ahead && !ahead) || (ahead == victim_ahead && last_use_[s] < last_use_[victim])) {
        victim = s;
        victim_ahead = ahead;
      }
    }
    if (victim >= 0) {
      resident_[victim].reset();  // its buffer is back in the pool (or once the cache's write of it ends)
      continue;
    }
    // Every buffer is in a fetch, held by a reader's copy, or (for the prefetcher) ahead: wait for one
    // (a buffer coming back, a shard touched) and look again; a copy ends within microseconds.
    cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

ObjectInfo ShardStream::version(uint32_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return versions_[i];
}

void ShardStream::publish(uint32_t i, const std::shared_ptr<PageBuffer>& buffer, FetchedFrom from,
                          const ObjectInfo& version) const {
  auto bytes =
      std::make_shared<const ShardBytes>(buffer, std::span<const uint8_t>(buffer->data(), shards_[i].object.size));
  {
    std::lock_guard<std::mutex> lock(mu_);
    resident_[i] = std::move(bytes);
    fetching_[i] = 0;
    last_use_[i] = ++use_clock_;
    versions_[i] = version;
    if (from == FetchedFrom::kStorage) {
      ++stats_.shard_fetches;
      stats_.bytes_received += shards_[i].object.size;
    } else {
      ++stats_.cache_hits;
    }
  }
  cv_.notify_all();
}

Status ShardStream::fetch(uint32_t i, const std::shared_ptr<PageBuffer>& buffer) const {
  const StreamedShard& shard = shards_[i];
  ObjectCheck check;
  if (check_) check = [&](std::span<const uint8_t> bytes) { return check_(i, bytes); };
  // Published as soon as the bytes are good: the cache's write (kDisk) follows on this thread, off the
  // readers' path, with this buffer held until it ends.
  return fetch_object(*store_, cache_.get(), shard.object, shard.key, buffer->span().first(shard.object.size), check,
                      [&](FetchedFrom from, const ObjectInfo& version) { publish(i, buffer, from, version); })
      .status();
}

Result<std::shared_ptr<const ShardBytes>> ShardStream::get(uint32_t i) const {
  if (i >= shards_.size()) return invalid_argument("shard " + std::to_string(i) + " out of range");
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = generation_;
    if (!touched_[i]) {
      touched_[i] = 1;
      if (planned_[i]) {
        --ahead_;
        cv_.notify_all();  // the walker may queue the next shard; the prefetcher may take this one's buffer later
      }
    }
    last_use_[i] = ++use_clock_;
    if (resident_[i]) return resident_[i];
    if (auto f = failed_.find(i); f != failed_.end()) return f->second;
  }
  // From here the reader waits for a download (the prefetcher's, the HTTP engine's, or its own): not library
  // work, so a fork need not wait for it (fork_gate.h). Declared before the lock, so that it ends (and may
  // wait at the gate) after the lock is released.
  const ForkGate::Pause pause;
  std::unique_lock<std::mutex> lock(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  ++stats_.reader_waits;
  const auto waited = [&] {
    stats_.reader_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto cancelled = [&] { return cancelled_error("reading shard " + object_display_name(shards_[i].object.url)); };
  for (;;) {
    if (resident_[i]) {
      waited();
      last_use_[i] = ++use_clock_;
      return resident_[i];
    }
    if (auto f = failed_.find(i); f != failed_.end()) {
      waited();
      return f->second;
    }
    if (stop_) return Status(StatusCode::kCancelled, "the shard stream is closing");
    if (CancelScope::cancelled()) return cancelled();
    if (fetching_[i]) {  // a prefetch (or another reader) has it in flight; this reader's scope is watched
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      continue;
    }
    std::shared_ptr<PageBuffer> buffer = take_buffer(lock, i, /*reader=*/true);
    if (!buffer) return stop_ ? Status(StatusCode::kCancelled, "the shard stream is closing") : cancelled();
    if (resident_[i] || fetching_[i]) continue;  // someone got there while this waited for a buffer
    fetching_[i] = 1;
    lock.unlock();
    const Status st = fetch(i, buffer);
    buffer.reset();
    lock.lock();
    if (st.is_ok()) continue;  // published
    fetching_[i] = 0;
    cv_.notify_all();
    waited();
    // A read cancelled by its own caller (the loader ending the epoch, Ctrl-C) says nothing about the shard.
    if (st.code() == StatusCode::kCancelled) return st;
    // A shard that cannot be fetched is the storage's failure, never its samples': it must not be
    // skipped or quarantined as a bad sample (the loader retries kEnvironment, then raises it).
    Status failed = failure(i, st);
    if (generation == generation_) failed_.try_emplace(i, failed);
    return failed;
  }
}

void ShardStream::plan(EpochOrder order, int64_t start, std::function<uint32_t(int64_t)> shard_of) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    order_ = std::make_shared<const EpochOrder>(std::move(order));
    walk_ = start;
    shard_of_ = std::move(shard_of);
    std::fill(touched_.begin(), touched_.end(), 0);
    std::fill(planned_.begin(), planned_.end(), 0);
    failed_.clear();
    ahead_ = 0;
    queue_.clear();
    queue_head_ = 0;
  }
  cv_.notify_all();
}

void ShardStream::plan_shards(std::vector<uint32_t> shards) {
  std::vector<int64_t> indices(shards.begin(), shards.end());
  plan(EpochOrder(std::move(indices)), 0, [](int64_t s) { return static_cast<uint32_t>(s); });
}

void ShardStream::walk_loop() {
  std::vector<uint8_t> seen(shards_.size());
  uint64_t seen_generation = ~uint64_t{0};
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (order_ && walk_ < order_->size() && (generation_ != seen_generation || ahead_ < ahead_limit()));
    });
    if (stop_) return;
    if (generation_ != seen_generation) {
      std::fill(seen.begin(), seen.end(), 0);
      seen_generation = generation_;
    }
    // Scan for the next shard not seen this plan, without the lock (readers go on); most positions
    // fall in shards already seen.
    const auto order = order_;
    const auto shard_of = shard_of_;
    const uint64_t generation = generation_;
    int64_t k = walk_;
    lock.unlock();
    int64_t found = -1;
    const int64_t end = order->size();
    for (; k < end; ++k) {
      const uint32_t s = shard_of((*order)[k]);
      if (s < seen.size() && !seen[s]) {
        seen[s] = 1;
        found = s;
        ++k;
        break;
      }
    }
    lock.lock();
    if (generation != generation_) continue;  // a new plan arrived while scanning
    walk_ = found < 0 ? end : k;
    if (found < 0) continue;
    const auto s = static_cast<uint32_t>(found);
    if (touched_[s]) continue;  // a reader got there first
    // Ahead of the readers: kept in memory for them (a shard already there too), fetched when it is not.
    planned_[s] = 1;
    ++ahead_;
    if (!resident_[s] && !fetching_[s]) queue_.push_back(s);
    cv_.notify_all();
  }
}

void ShardStream::fetch_loop() {
  CancelScope scope(prefetch_cancel_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || queue_head_ < queue_.size(); });
    if (stop_) return;
    const uint32_t s = queue_[queue_head_++];
    const uint64_t generation = generation_;
    if (resident_[s] || fetching_[s] || failed_.count(s)) continue;
    std::shared_ptr<PageBuffer> buffer = take_buffer(lock, s, /*reader=*/false);
    if (!buffer) return;                                             // stopping
    if (resident_[s] || fetching_[s] || failed_.count(s)) continue;  // while it waited for a buffer
    fetching_[s] = 1;
    lock.unlock();
    const Status st = fetch(s, buffer);
    buffer.reset();
    lock.lock();
    if (st.is_ok()) continue;
    fetching_[s] = 0;
    if (generation == generation_ && st.code() != StatusCode::kCancelled)
      failed_.try_emplace(s, failure(s, st));  // for its readers
    cv_.notify_all();
  }
}

SourceMemory ShardStream::memory_wanted(int64_t shard_window) const {
  const uint64_t shards = shards_.size(), buffer = pool_->buffer_bytes();
  if (shard_window <= 0) return {.least = buffer, .wanted = shards * buffer};  // the sample order: all of it
  const uint64_t window = static_cast<uint64_t>(shard_window);
  return {.least = std::min(shards, 2 * window) * buffer, .wanted = std::min(shards, 3 * window) * buffer};
}

void ShardStream::set_memory(uint64_t bytes, int64_t shard_window) const {
  set_memory_limit(bytes, shard_window <= 0 ? 1 : static_cast<int>(std::min<int64_t>(2 * shard_window, 1 << 20)));
}

RemoteStats ShardStream::stats() const {
  RemoteStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  s.buffers = pool_->allocated();
  s.memory_limit = memory_limit();
  if (cache_) s.damaged = cache_->stats().damaged;
  return s;
}

}  // namespace chute
