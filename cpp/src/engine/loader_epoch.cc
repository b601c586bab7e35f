// The Loader's epochs: start and cancel, dispatch of epoch positions to the workers, in-order finalising
// of their samples into batches (the reorder buffer, with kSkip's moves and kRaise's errors), and the
// consumer's next(). The thread pool, the ring's growth and the tuning are loader.cc's.
#include <algorithm>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "chute/engine/loader.h"
#include "engine/detail/loader_state.h"

namespace chute {

using detail::now_s;

int64_t Loader::position() const {
  if (fork_mark_.in_child()) return 0;  // a forked child never locks: see fork.h
  std::lock_guard<std::mutex> lock(shared_->mu);
  return epoch_->consumed;
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
  e.mixing.clear();
  e.tasks.clear();
  e.batch_errors.clear();
  shared_->work_cv.notify_all();
}

Status Loader::start_epoch(uint64_t epoch, int64_t start) {
  return begin_epoch({.seed = options_.seed, .epoch = epoch}, start, order_.epoch(epoch));
}

Status Loader::resume_epoch(uint64_t epoch, const std::vector<EpochSplit>& splits, int64_t start) {
  if (splits.empty()) return start_epoch(epoch, start);
  CHUTE_ASSIGN_OR_RETURN(auto rest, order_.remainder(splits));
  return begin_epoch({.seed = options_.seed, .epoch = epoch}, start, order_.epoch(epoch, std::move(rest)));
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
    options_.decode.budget->set_reserved(shared_->ring.slots_with_memory() * shared_->ring.slot_footprint());
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
  EpochState::Ready& r = e.ready.emplace_back(EpochState::Ready{it->second, count, next_position, std::move(error)});
  e.batch_slot.erase(it);
  if (mix_ && !r.error) {
    // The batch transform's draws are keyed by the batch's end position in the epoch order: the same
    // batch gets the same draws whatever the threads, and after a resume (batch_mix.h).
    r.mix =
        mix_->draw({.seed = e.seed, .epoch = e.epoch}, static_cast<uint64_t>(next_position), out_height(), out_width());
    // Parts for the threads that can work (at most 8: a part of a 256-image batch is still 5 MB of values).
    const int parts = std::clamp(tuner_.threads(), 1, 8);
    r.mix_parts_left = parts;
    for (int part = 0; part < parts; ++part)
      e.mixing.push_back(
          {.generation = e.generation, .slot = r.slot, .count = count, .params = r.mix, .part = part, .parts = parts});
    shared_->work_cv.notify_all();
  }
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
    const bool mixing = !e.ready.empty() && e.ready.front().mix_parts_left > 0;  // its transform still runs
    if (!e.ready.empty() && !mixing) {
      const EpochState::Ready r = e.ready.front();
      e.totals.ready_sum += static_cast<int64_t>(e.ready.size());
      ++e.totals.next_calls;
      e.ready.pop_front();
      ++e.delivered;
      ++e.totals.batches;
      e.totals.samples_delivered += r.count;
      e.consumed = r.next_position;
      auto batch = std::make_shared<Batch>(shared_, r.slot, r.count, r.mix);
      on_return.armed = false;
      if (timed) {
        e.last_delivery_s = waited();
        tune(e.last_delivery_s);
      }
      lock.unlock();
      shared_->work_cv.notify_all();  // the prefetch window moved
      return batch;
    }
    if (e.finished && !mixing) {
      e.active = false;
      return std::shared_ptr<Batch>();
    }
    // Nothing ready, nothing running, and no buffer to start on: every buffer is held by the consumer.
    if (!mixing && e.in_flight == 0 && !can_dispatch() && !shared_->ring.can_acquire() && !shared_->ring.growing() &&
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

}  // namespace chute
