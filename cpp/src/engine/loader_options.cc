// The options' one check (LoaderOptions::validate, DecodeOptions::validate) and their names.
#include <sched.h>

#include <cmath>
#include <sstream>
#include <string>

#include "chute/engine/loader.h"
#include "chute/engine/processor.h"

namespace chute {

const char* error_policy_name(ErrorPolicy policy) { return policy == ErrorPolicy::kSkip ? "skip" : "raise"; }

Result<ErrorPolicy> parse_error_policy(std::string_view name) {
  if (name == "raise") return ErrorPolicy::kRaise;
  if (name == "skip") return ErrorPolicy::kSkip;
  return invalid_argument("on_error must be 'raise' or 'skip', got '" + std::string(name) + "'");
}

const char* decode_mode_name(DecodeMode mode) { return mode == DecodeMode::kReduced ? "reduced" : "exact"; }

Result<DecodeMode> parse_decode_mode(std::string_view name) {
  if (name == "exact") return DecodeMode::kExact;
  if (name == "reduced") return DecodeMode::kReduced;
  return invalid_argument(
      "decode must be 'exact' (PIL's pixels) or 'reduced' (a JPEG's scaled IDCT while the "
      "resize still shrinks by reducing_gap), got '" +
      std::string(name) + "'");
}

Status DecodeOptions::check_reducing_gap(double gap) {
  // Pillow refuses a reducing_gap below 1.0 too: the reduction would leave the resize enlarging.
  if (gap >= 1.0 && std::isfinite(gap)) return Status::ok();
  std::ostringstream shown;
  shown << gap;
  return invalid_argument("reducing_gap must be a finite number >= 1.0, as in Pillow; got " + shown.str());
}

Status DecodeOptions::validate() const {
  CHUTE_RETURN_IF_ERROR(kMaxPixels.check(max_pixels));
  CHUTE_RETURN_IF_ERROR(check_reducing_gap(reducing_gap));
  return kMaxFileBytes.check(max_file_bytes);
}

Status LoaderOptions::validate() const {
  CHUTE_RETURN_IF_ERROR(kBatchSize.check(batch_size));
  CHUTE_RETURN_IF_ERROR(kNumThreads.check(num_threads));
  CHUTE_RETURN_IF_ERROR(kMaxThreads.check(max_threads));
  if (num_threads > 0 && max_threads > 0 && num_threads > max_threads)
    return invalid_argument("num_threads=" + std::to_string(num_threads) +
                            " exceeds max_threads=" + std::to_string(max_threads));
  CHUTE_RETURN_IF_ERROR(kPrefetch.check(prefetch));
  CHUTE_RETURN_IF_ERROR(kMaxMemory.check(max_memory));
  CHUTE_RETURN_IF_ERROR(kMaxRingBytes.check(max_ring_bytes));
  CHUTE_RETURN_IF_ERROR(kExtraBuffers.check(extra_buffers));
  CHUTE_RETURN_IF_ERROR(kRank.check(shard.rank));
  CHUTE_RETURN_IF_ERROR(kWorldSize.check(shard.world_size));
  CHUTE_RETURN_IF_ERROR(kShardWindow.check(shard_window));
  CHUTE_RETURN_IF_ERROR(decode.validate());
  if ((num_threads == 0 || prefetch == 0) && !collect_stats)
    return invalid_argument("auto threads or prefetch need collect_stats: they tune from the statistics");
  if (host_allocator == nullptr) return invalid_argument("host_allocator is null");
  if (cpu_affinity) {
    for (int cpu : *cpu_affinity)
      if (cpu < 0 || cpu >= CPU_SETSIZE) return invalid_argument("cpu_affinity: no CPU " + std::to_string(cpu));
  }
  return Status::ok();
}

}  // namespace chute
