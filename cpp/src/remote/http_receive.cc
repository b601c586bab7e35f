// HttpEngine::receive: an object into the caller's memory by parallel ranged GETs, each range's bytes
// written in place as they arrive (the engine itself: http_engine.cc).

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <vector>

#include "chute/remote/http_engine.h"

namespace chute {

Status HttpEngine::receive(const HttpRequest& object, std::span<uint8_t> dst, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return invalid_argument("receive: chunk_bytes must be > 0");
  // Every range is submitted at once: the bodies land in `dst`, not in buffers of the engine's, so nothing
  // grows with the number of ranges queued; the engine's in-flight limit paces them, first come first.
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::future<Result<HttpResponse>>> ranges;
  for (uint64_t offset = 0; offset < dst.size(); offset += chunk_bytes) {
    HttpRequest r = object;
    r.method = "GET";
    r.offset = offset;
    r.length = std::min<uint64_t>(chunk_bytes, dst.size() - offset);
    r.sink_buffer = dst.data() + offset;
    auto promise = std::make_shared<std::promise<Result<HttpResponse>>>();
    ranges.push_back(promise->get_future());
    submit_cancellable(
        std::move(r), [promise](Result<HttpResponse> result) { promise->set_value(std::move(result)); }, cancel);
  }
  // Each range is waited for, a failed one's too: none may write into `dst` once this returns.
  Status first_error;
  for (auto& range : ranges) {
    Result<HttpResponse> result = range.get();
    if (!result.is_ok() && first_error.is_ok()) {
      first_error = result.status();
      cancel->store(true);  // the ranges still queued or backing off end at once
    }
  }
  return first_error;
}

}  // namespace chute
