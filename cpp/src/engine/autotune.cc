#include "chute/engine/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace chute {

namespace {

int64_t buffers_fit(const TunerSettings& s) { return static_cast<int64_t>(s.max_memory / s.slot_bytes); }

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

int Autotuner::max_prefetch(const TunerSettings& s) {
  if (s.slot_bytes == 0) return s.prefetch;
  return static_cast<int>(std::clamp<int64_t>(buffers_fit(s) - s.reserved_buffers, 1, 1 << 16));
}

Status Autotuner::check_memory(const TunerSettings& s) {
  if (s.slot_bytes == 0 || buffers_fit(s) >= 1 + int64_t{s.reserved_buffers}) return Status::ok();
  const int extra = s.reserved_buffers - 2;
  return invalid_argument("max_memory of " + mib(s.max_memory) + " (" + std::to_string(s.max_memory) +
                          " bytes) holds fewer than " + std::to_string(1 + s.reserved_buffers) + " batch buffers of " +
                          mib(s.slot_bytes) + " (prefetch 1 and 2 more" +
                          (extra > 0 ? ", and " + std::to_string(extra) + " for copies to the device in flight" : "") +
                          "), whatever the prefetch: raise max_memory, or lower batch_size or the output size");
}

int Autotuner::initial_prefetch(const TunerSettings& s) {
  // Every thread needs a sample to work on: 2 * threads samples in flight, rounded up to batches, plus
  // the batch being filled.
  const int64_t wanted = std::max<int64_t>(2, (2 * s.max_threads + s.batch_size - 1) / s.batch_size + 1);
  return static_cast<int>(std::min<int64_t>(wanted, max_prefetch(s)));
}

Autotuner::Autotuner(const TunerSettings& settings)
    : settings_(settings),
      threads_(std::clamp(settings.threads, 1, std::max(1, settings.max_threads))),
      prefetch_(settings.tune_prefetch ? initial_prefetch(settings) : settings.prefetch) {}

bool Autotuner::observe(const TunerObservation& now) {
  if (!started_) {
    started_ = true;
    last_ = now;
    return false;
  }
  const double dt = now.now_s - last_.now_s;
  const int64_t batches = now.batches - last_.batches;
  if (dt < kWindowSeconds || batches < kWindowBatches) return false;
  const int64_t samples = now.samples - last_.samples;
  const double busy = now.busy_s - last_.busy_s, idle = now.idle_s - last_.idle_s;
  const double wait = now.wait_s - last_.wait_s, own = now.consumer_s - last_.consumer_s;
  const int64_t delivered = now.samples_delivered - last_.samples_delivered;
  last_ = now;
  if (samples <= 0 || wait + own <= 0) return false;
  ++decisions_;
  const double stall = wait / (wait + own);
  const double per_sample = busy / samples;                    // w
  const double demand = own > 0 ? delivered / own : HUGE_VAL;  // D
  const int before_threads = threads_, before_prefetch = prefetch_;

  if (settings_.tune_threads) {
    const double needed = kHeadroom * demand * per_sample;
    int target =
        needed >= settings_.max_threads ? settings_.max_threads : std::max(1, static_cast<int>(std::ceil(needed)));
    if (floor_ > 1 && std::abs(demand - floor_demand_) > kDemandChange * floor_demand_) floor_ = 1;
    if (stall > kStallGrow) {
      // Too few threads here: never come back this low while the demand holds.
      if (threads_ < settings_.max_threads) {
        floor_ = std::max(floor_, threads_ + 1);
        floor_demand_ = demand;
      }
      threads_ = std::max(target, threads_ + 1);
    } else if (stall < kStallShrink && target < threads_) {
      threads_ = std::max(target, floor_);
    }
    threads_ = std::clamp(threads_, 1, settings_.max_threads);
  }
  if (settings_.tune_prefetch && stall > kStallGrow && idle > kIdleGrow * (idle + busy))
    prefetch_ = std::min(prefetch_ + 1, max_prefetch(settings_));
  return threads_ != before_threads || prefetch_ != before_prefetch;
}

}  // namespace chute
