#include "chute/stats.h"

#include <algorithm>
#include <array>
#include <cstdio>

namespace chute {

double LoaderStats::stall_fraction() const {
  const double total = wait_s + consumer_s;
  return total > 0 ? wait_s / total : 0.0;
}

namespace {
std::string printf_string(const char* format, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, format, args...);
  return buffer;
}
}  // namespace

Verdict diagnose(const LoaderStats& s) {
  Verdict v;
  if (s.batches < 2 || s.wait_s + s.consumer_s <= 0 || s.samples == 0) {
    v.bound = "unknown";
    v.summary = "not enough batches yet to tell what limits the loader";
    return v;
  }
  const double stall = s.stall_fraction();
  const double n = static_cast<double>(s.samples);
  const std::array<std::pair<const char*, double>, 3> stages{{
      {"storage", s.stages.read_ns * 1e-9},
      {"decode", s.stages.decode_ns * 1e-9},
      {"transform", s.stages.transform_ns * 1e-9},
  }};
  double busy = 0;
  for (const auto& [name, seconds] : stages) busy += seconds;
  const auto top = std::max_element(stages.begin(), stages.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  const double rate = s.elapsed_s > 0 ? s.samples_delivered / s.elapsed_s : 0.0;
  auto share = [&](double seconds) { return busy > 0 ? 100.0 * seconds / busy : 0.0; };
  const std::string per_sample = printf_string(
      "per sample, a worker spends %.3f ms reading (%.0f%%), %.3f ms decoding (%.0f%%), %.3f ms transforming "
      "(%.0f%%)",
      1e3 * stages[0].second / n, share(stages[0].second), 1e3 * stages[1].second / n, share(stages[1].second),
      1e3 * stages[2].second / n, share(stages[2].second));
  const std::string settings = printf_string("%d of %d threads active, prefetch %d, %.0f samples/s delivered",
                                             s.active_threads, s.threads, s.prefetch, rate);
  const std::string waited = printf_string("the consumer waited %.0f%% of its time (%.2f s waiting, %.2f s in its own work)",
                                           100 * stall, s.wait_s, s.consumer_s);
  if (stall >= kInputBoundStall) {
    v.bound = "input";
    v.limit = top->first;
    v.summary = "input-bound: " + waited + "; " + per_sample + ": " + v.limit + " is the limit. " + settings + ".";
    // Busy wall time well above CPU time: the threads wait on storage or lose their cores to other work.
    if (busy > 0 && s.worker_cpu_s < 0.8 * busy)
      v.summary += printf_string(" The workers got %.2f CPU-s per busy second: they wait on I/O or compete for cores.",
                                 s.worker_cpu_s / busy);
    // Workers idle while the consumer waits: the prefetch window or the buffers, not a stage, held them.
    const double worker_time = s.worker_idle_s + busy;
    if (worker_time > 0 && s.worker_idle_s > 0.2 * worker_time)
      v.summary += printf_string(" Active workers were idle %.0f%% of their time: a larger prefetch would let them run ahead.",
                                 100 * s.worker_idle_s / worker_time);
  } else {
    v.bound = "consumer";
    v.summary = "consumer-bound: " + waited + ", so the loader keeps up; " + per_sample + ". " + settings + ".";
  }
  return v;
}

}  // namespace chute
