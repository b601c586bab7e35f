// Statistics across the boundary: a loader's LoaderStats as a dict (stats_dict, used by every loader
// binding), and the one verdict engine (chute::diagnose) for figures measured elsewhere: `chute doctor`
// builds the same dict from a torch DataLoader's measurements and asks the same question.
#include <nanobind/stl/string.h>

#include "bindings.h"

namespace chute::py {

nb::dict stats_dict(const LoaderStats& s) {
  nb::dict d;
  d["elapsed_s"] = s.elapsed_s;
  d["samples"] = s.samples;
  d["samples_delivered"] = s.samples_delivered;
  d["batches"] = s.batches;
  d["bytes_read"] = s.stages.bytes_read;
  d["errors_skipped"] = s.errors_skipped;
  d["decode_warnings"] = s.decode_warnings;
  d["read_s"] = s.stages.read_ns * 1e-9;
  d["decode_s"] = s.stages.decode_ns * 1e-9;
  d["transform_s"] = s.stages.transform_ns * 1e-9;
  d["batch_s"] = s.batch_s;
  d["worker_cpu_s"] = s.worker_cpu_s;
  d["worker_idle_s"] = s.worker_idle_s;
  d["wait_s"] = s.wait_s;
  d["fill_wait_s"] = s.fill_wait_s;
  d["consumer_s"] = s.consumer_s;
  d["stall_fraction"] = s.stall_fraction();
  d["mean_ready_batches"] = s.next_calls > 0 ? static_cast<double>(s.ready_sum) / s.next_calls : 0.0;
  d["threads"] = s.threads;
  d["active_threads"] = s.active_threads;
  d["prefetch"] = s.prefetch;
  d["max_prefetch"] = s.max_prefetch;
  d["auto_threads"] = s.auto_threads;
  d["auto_prefetch"] = s.auto_prefetch;
  d["batch_buffer_bytes"] = s.slot_bytes;
  d["batch_buffer_held_bytes"] = s.slot_footprint;
  d["batch_buffers"] = s.ring_slots;
  d["cores"] = s.cores;
  d["process_cpu_s"] = s.process_cpu_s;
  const Verdict v = diagnose(s);
  d["bound"] = v.bound;
  d["limit"] = v.limit;
  d["stage"] = v.stage;
  d["verdict"] = v.summary;
  return d;
}

namespace {

// The inverse of stats_dict for the fields diagnose() reads; a missing key counts as 0.
LoaderStats stats_from_dict(const nb::dict& d) {
  auto num = [&](const char* key) { return d.contains(key) ? nb::cast<double>(d[key]) : 0.0; };
  auto count = [&](const char* key) { return d.contains(key) ? nb::cast<int64_t>(d[key]) : int64_t{0}; };
  LoaderStats s;
  s.elapsed_s = num("elapsed_s");
  s.samples = count("samples");
  s.samples_delivered = count("samples_delivered");
  s.batches = count("batches");
  s.stages.read_ns = static_cast<int64_t>(num("read_s") * 1e9);
  s.stages.decode_ns = static_cast<int64_t>(num("decode_s") * 1e9);
  s.stages.transform_ns = static_cast<int64_t>(num("transform_s") * 1e9);
  s.worker_cpu_s = num("worker_cpu_s");
  s.worker_idle_s = num("worker_idle_s");
  s.wait_s = num("wait_s");
  s.consumer_s = num("consumer_s");
  s.threads = static_cast<int>(count("threads"));
  s.active_threads = static_cast<int>(count("active_threads"));
  s.prefetch = static_cast<int>(count("prefetch"));
  s.max_prefetch = static_cast<int>(count("max_prefetch"));
  s.auto_prefetch = d.contains("auto_prefetch") && nb::cast<bool>(d["auto_prefetch"]);
  s.cores = static_cast<int>(count("cores"));
  s.process_cpu_s = num("process_cpu_s");
  return s;
}

}  // namespace

void register_stats(nb::module_& m) {
  m.def(
      "diagnose",
      [](const nb::dict& figures) {
        const Verdict v = diagnose(stats_from_dict(figures));
        nb::dict d;
        d["bound"] = v.bound;
        d["limit"] = v.limit;
        d["stage"] = v.stage;
        d["verdict"] = v.summary;
        return d;
      },
      nb::arg("figures"), "chute's verdict (chute/stats.h: diagnose) on figures given as loader.stats() names them.");
  m.attr("MIN_VERDICT_BATCHES") = kMinVerdictBatches;
  m.attr("INPUT_BOUND_STALL") = kInputBoundStall;
  m.attr("STORAGE_SHARE") = kStorageShare;
  m.attr("PREFETCH_IDLE") = kPrefetchIdle;
  m.attr("SPARE_CORES") = kSpareCores;
  m.attr("CONTENDED_CPU") = kContendedCpu;
}

}  // namespace chute::py
