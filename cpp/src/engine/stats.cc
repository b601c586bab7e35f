#include "chute/engine/stats.h"

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
  if (s.batches < kMinVerdictBatches || s.wait_s + s.consumer_s <= 0 || s.samples == 0) {
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
  const auto top =
      std::max_element(stages.begin(), stages.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  v.stage = busy > 0 ? top->first : "";
  const double rate = s.elapsed_s > 0 ? s.samples_delivered / s.elapsed_s : 0.0;
  auto share = [&](double seconds) { return busy > 0 ? seconds / busy : 0.0; };
  const std::string per_sample = printf_string(
      "per sample, a worker spends %.3f ms reading (%.0f%%), %.3f ms decoding (%.0f%%), %.3f ms transforming "
      "(%.0f%%)",
      1e3 * stages[0].second / n, 100 * share(stages[0].second), 1e3 * stages[1].second / n,
      100 * share(stages[1].second), 1e3 * stages[2].second / n, 100 * share(stages[2].second));
  std::string settings = printf_string("%d of %d threads active, prefetch %d, %.0f samples/s delivered",
                                       s.active_threads, s.threads, s.prefetch, rate);
  // The process's CPU use against its cores: what is left for more work.
  const bool cpu_known = s.cores > 0 && s.elapsed_s > 0 && s.process_cpu_s > 0;
  const double cores_used = cpu_known ? s.process_cpu_s / s.elapsed_s : 0.0;
  const double spare = cpu_known ? s.cores - cores_used : 0.0;
  if (cpu_known) settings += printf_string(", %.2f of %d cores busy", cores_used, s.cores);
  const std::string waited =
      printf_string("the consumer waited %.0f%% of its time (%.2f s waiting, %.2f s in its own work)", 100 * stall,
                    s.wait_s, s.consumer_s);
  if (stall < kInputBoundStall) {
    v.bound = "consumer";
    v.summary = "consumer-bound: " + waited + ", so the loader keeps up; " + per_sample + ". " + settings + ".";
    return v;
  }
  v.bound = "input";
  const double worker_time = s.worker_idle_s + busy;
  const double idle = worker_time > 0 ? s.worker_idle_s / worker_time : 0.0;
  const double cpu_per_busy = busy > 0 ? s.worker_cpu_s / busy : 1.0;
  std::string why;
  if (share(stages[0].second) >= kStorageShare) {
    v.limit = "storage";
    why = printf_string("reads take %.0f%% of the workers' busy time", 100 * share(stages[0].second));
  } else if (idle > kPrefetchIdle && cpu_known && spare >= kSpareCores &&
             (!s.auto_prefetch || s.prefetch >= s.max_prefetch)) {
    v.limit = "prefetch";
    why = s.auto_prefetch ? printf_string(
                                "the active workers were idle %.0f%% of their time while the consumer waited, with "
                                "%.2f cores to spare, and auto prefetch is at the %d batches max_memory allows: more "
                                "memory for batch buffers would let them run ahead",
                                100 * idle, spare, s.max_prefetch)
                          : printf_string(
                                "the active workers were idle %.0f%% of their time while the consumer waited, with "
                                "%.2f cores to spare: a larger prefetch would let them run ahead",
                                100 * idle, spare);
  } else if (cpu_per_busy < kContendedCpu && (!cpu_known || spare >= kSpareCores)) {
    v.limit = "cores";
    why = printf_string(
        "the workers got %.2f CPU-s per busy second: they were ready to run but other processes had the "
        "cores (%s is their busiest stage)",
        cpu_per_busy, v.stage.c_str());
  } else if (busy > 0) {
    v.limit = v.stage;
    why = printf_string("%s is the workers' busiest stage", v.stage.c_str());
    if (cpu_per_busy < kContendedCpu)
      why += printf_string(
          "; the workers got %.2f CPU-s per busy second, the rest going to this process's own threads, which "
          "kept its cores busy",
          cpu_per_busy);
  } else {
    v.limit = "unknown";
    why = "no stage times were measured";
  }
  if (v.limit != "prefetch" && idle > kPrefetchIdle && s.auto_prefetch && s.prefetch < s.max_prefetch)
    why += printf_string(
        "; the workers idled %.0f%% of their time, and auto prefetch is growing on that (now %d, "
        "at most %d)",
        100 * idle, s.prefetch, s.max_prefetch);
  v.summary =
      "input-bound: " + waited + "; " + per_sample + ": " + v.limit + " is the limit (" + why + "). " + settings + ".";
  return v;
}

}  // namespace chute
