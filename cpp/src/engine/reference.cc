#include "chute/engine/reference.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "chute/base/fork_gate.h"
#include "chute/base/thread.h"
#include "chute/order/sampler.h"

namespace chute {

Status reference_decode(JpegDecoder& decoder, std::span<const uint8_t> file, const ReferenceWindow& keep, uint64_t pass,
                        uint64_t index, std::vector<uint8_t>& pixels) {
  CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, decoder.read_info(file));
  Window window{0, 0, info.width, info.height};
  SampleRng rng(0, pass, index);
  if (keep.crop) {
    const CropBox b = random_resized_crop_box(info.width, info.height, *keep.crop, rng);
    window = {b.x, b.y, b.width, b.height};
  } else if (keep.pipeline) {
    CHUTE_ASSIGN_OR_RETURN(const SamplePlan plan, keep.pipeline->plan(info.width, info.height, rng));
    window = {plan.window_x, plan.window_y, plan.window_width, plan.window_height};
  }
  return decoder.decode(file, window, pixels).status();
}

DecodeRate decode_rate(const std::vector<std::vector<uint8_t>>& files, const ReferenceWindow& keep,
                       double min_seconds) {
  DecodeRate rate;
  if (files.empty()) return rate;
  JpegDecoder decoder;
  std::vector<uint8_t> pixels;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  uint64_t pass = 0;
  do {
    for (size_t i = 0; i < files.size(); ++i)
      ++(reference_decode(decoder, files[i], keep, pass, i, pixels).is_ok() ? rate.images : rate.failures);
    ++pass;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_seconds);
  rate.images_per_second = rate.images / elapsed;
  return rate;
}

Result<ReadRate> read_rate(const Source& source, int threads, bool shuffle) {
  const EpochOrder order(source.size(), shuffle, /*seed=*/0, /*epoch=*/0, Shard{.even_split = false});
  std::atomic<int64_t> next{0}, bytes{0}, failures{0};
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> pool;  // joined when it goes, before the clock stops
    const Status started = start_threads<std::jthread>(
        "chute-read", 0, std::max(1, threads),
        [&](int) {
          std::vector<uint8_t> out;
          for (int64_t k; (k = next.fetch_add(1)) < order.size();) {
            const ForkGate::Work work;
            if (source.read(order[k], out).is_ok())
              bytes += static_cast<int64_t>(out.size());
            else
              ++failures;
          }
        },
        pool);
    if (pool.empty()) return started;
  }
  ReadRate r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.bytes = bytes.load();
  r.failures = failures.load();
  return r;
}

}  // namespace chute
