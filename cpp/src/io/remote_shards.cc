#include "chute/io/remote_shards.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "chute/base/thread.h"
#include "chute/remote/cache_key.h"

namespace chute {

Result<std::shared_ptr<RemoteShards>> RemoteShards::create(std::shared_ptr<ObjectStore> store,
                                                           std::shared_ptr<ShardCache> cache, std::string base_url,
                                                           std::vector<ShardInfo> shards, Options options) {
  if (options.lookahead < 1 || options.fetch_threads < 1 || options.max_mapped < 1)
    return invalid_argument("remote shards: lookahead, fetch_threads and max_mapped must be at least 1");
  auto r = std::shared_ptr<RemoteShards>(new RemoteShards());
  r->store_ = std::move(store);
  r->cache_ = std::move(cache);
  r->base_url_ = std::move(base_url);
  r->shards_ = std::move(shards);
  r->options_ = options;
  const uint64_t limit = r->cache_->options().limit_bytes;
  r->max_mapped_bytes_ = limit / 2;
  r->max_ahead_bytes_ = limit / 4;
  const size_t n = r->shards_.size();
  r->mapped_.resize(n);
  r->last_use_.resize(n);
  r->touched_.resize(n);
  r->planned_.resize(n);
  // Named threads (top -H, py-spy); a thread the kernel refuses is an error here, never std::terminate
  // (the destructor stops and joins those already started).
  RemoteShards* p = r.get();
  CHUTE_ASSIGN_OR_RETURN(std::thread walker, start_thread("chute-walk", [p] { p->walk_loop(); }));
  r->threads_.push_back(std::move(walker));
  CHUTE_RETURN_IF_ERROR(start_threads(
      "chute-fetch", 0, options.fetch_threads, [p](int) { p->fetch_loop(); }, r->threads_));
  return r;
}

RemoteShards::~RemoteShards() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  prefetch_cancel_->cancel();  // downloads in flight end within ~0.1 s, whatever the server does
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::string RemoteShards::shard_url(uint32_t i) const { return base_url_ + shards_[i].name; }

Status RemoteShards::failure(uint32_t i, const Status& fetch_status) const {
  return environment_error("fetching shard " + redact_url(shard_url(i)) + ": " + fetch_status.to_string());
}

Result<std::shared_ptr<const MappedFile>> RemoteShards::fetch(uint32_t i) const {
  const ShardInfo& info = shards_[i];
  const std::string url = shard_url(i);
  // The key names the shard's content (its id is the hash of its record headers), so a repacked dataset
  // at the same URL is never served from an old entry.
  const std::string key = cache_key(url, info.shard_id);
  bool filled = false;
  auto file = cache_->get(
      key, info.file_size,
      [&](int fd) {
        filled = true;
        return store_->download(ObjectInfo{.url = url, .size = info.file_size, .etag = {}}, fd);
      },
      [&](const MappedFile& f) -> Status {
        CHUTE_ASSIGN_OR_RETURN(ShardHeader header, parse_shard_header(f.bytes(), url));
        if (header.shard_id != info.shard_id || header.record_count != info.record_count ||
            header.file_size != info.file_size)
          return corrupt_data("shard " + url + " is not the one its index lists (another pack's shard?)");
        return Status::ok();
      });
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (filled)
      ++stats_.shard_fetches;
    else if (file.is_ok())
      ++stats_.cache_hits;
  }
  return file;
}

void RemoteShards::keep_mapped(uint32_t i, std::shared_ptr<const MappedFile> file) const {
  last_use_[i] = ++use_clock_;
  if (mapped_[i]) return;
  mapped_bytes_ += file->bytes().size();
  mapped_[i] = std::move(file);
  ++mapped_count_;
  // Close the least recently used mappings (a reader still copying from one keeps its own reference)
  // down to the count and byte limits, never the one just added.
  while (mapped_count_ > options_.max_mapped || (max_mapped_bytes_ && mapped_bytes_ > max_mapped_bytes_)) {
    uint32_t oldest = i;
    for (uint32_t s = 0; s < mapped_.size(); ++s)
      if (mapped_[s] && s != i && (oldest == i || last_use_[s] < last_use_[oldest])) oldest = s;
    if (oldest == i) return;
    mapped_bytes_ -= mapped_[oldest]->bytes().size();
    mapped_[oldest].reset();
    --mapped_count_;
  }
}

Result<std::shared_ptr<const MappedFile>> RemoteShards::get(uint32_t i) const {
  if (i >= shards_.size()) return invalid_argument("shard " + std::to_string(i) + " out of range");
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = generation_;
    if (!touched_[i]) {
      touched_[i] = 1;
      if (planned_[i]) {
        --ahead_;
        ahead_bytes_ -= shards_[i].file_size;
        cv_.notify_all();  // the walker may queue the next shard
      }
    }
    if (mapped_[i]) {
      last_use_[i] = ++use_clock_;
      return mapped_[i];
    }
    if (auto f = failed_.find(i); f != failed_.end()) return f->second;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto file = fetch(i);  // or waits, on the cache's lock, for the prefetch in flight
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.reader_waits;
  stats_.reader_wait_s += waited;
  // A shard that cannot be fetched is the storage's failure, never its samples': it must not be skipped
  // or quarantined as a bad sample (the loader retries kEnvironment, then raises it).
  if (!file.is_ok()) {
    // A read cancelled by its own caller (the loader ending the epoch) says nothing about the shard.
    if (file.status().code() == StatusCode::kCancelled) return file.status();
    Status st = failure(i, file.status());
    if (generation == generation_) failed_.try_emplace(i, st);
    return st;
  }
  keep_mapped(i, *file);
  return file;
}

void RemoteShards::plan(EpochOrder order, int64_t start, std::function<uint32_t(int64_t)> shard_of) {
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
    ahead_bytes_ = 0;
    queue_.clear();
    queue_head_ = 0;
  }
  cv_.notify_all();
}

void RemoteShards::walk_loop() {
  std::vector<uint8_t> seen(shards_.size());
  uint64_t seen_generation = ~uint64_t{0};
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ ||
             (order_ && walk_ < order_->size() &&
              (generation_ != seen_generation ||
               (ahead_ < options_.lookahead && (ahead_ == 0 || !max_ahead_bytes_ || ahead_bytes_ < max_ahead_bytes_))));
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
    if (touched_[s] || mapped_[s]) continue;  // a reader got there first, or it is already local
    planned_[s] = 1;
    ++ahead_;
    ahead_bytes_ += shards_[s].file_size;
    queue_.push_back(s);
    cv_.notify_all();
  }
}

void RemoteShards::fetch_loop() {
  CancelScope scope(prefetch_cancel_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || queue_head_ < queue_.size(); });
    if (stop_) return;
    const uint32_t s = queue_[queue_head_++];
    if (mapped_[s] || failed_.count(s)) continue;
    const uint64_t generation = generation_;
    lock.unlock();
    auto file = fetch(s);
    lock.lock();
    if (file.is_ok())
      keep_mapped(s, *file);
    else if (generation == generation_ && file.status().code() != StatusCode::kCancelled)
      failed_.try_emplace(s, failure(s, file.status()));  // for its readers
  }
}

RemoteStats RemoteShards::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace chute
