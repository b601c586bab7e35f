#include "chute/reference.h"

#include <chrono>

#include "chute/jpeg_decoder.h"

namespace chute {

DecodeRate full_decode_rate(const std::vector<std::vector<uint8_t>>& files, double min_seconds) {
  DecodeRate rate;
  if (files.empty()) return rate;
  JpegDecoder decoder;
  std::vector<uint8_t> pixels;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (const auto& file : files) {
      auto info = decoder.read_info(file);
      if (!info.is_ok()) {
        ++rate.failures;
        continue;
      }
      pixels.resize(static_cast<size_t>(info->width) * info->height * 3);
      const Status st = decoder.decode(file, {0, 0, info->width, info->height}, pixels.data(),
                                       static_cast<size_t>(info->width) * 3);
      ++(st.is_ok() ? rate.images : rate.failures);
    }
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_seconds);
  rate.images_per_second = rate.images / elapsed;
  return rate;
}

}  // namespace chute
