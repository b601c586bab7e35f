// HttpEngine::download: an object into a file by parallel ranged GETs (the engine itself: http_engine.cc).

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "chute/remote/http_engine.h"

namespace chute {

Status HttpEngine::download(const HttpRequest& object, uint64_t size, int fd, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return invalid_argument("download: chunk_bytes must be > 0");
  if (size == 0) return Status::ok();
  // Each chunk is written into `fd` by the engine as it arrives (HttpRequest::sink_fd), in pieces of at
  // most 512 KiB, so a download holds no chunk-sized buffers: with 32 requests of 8 MiB in flight, and a
  // download per fetch thread, those would be up to a gigabyte beside the loader's own memory.
  // Completions come back to this thread, which keeps the requests in flight.
  struct Completed {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<uint64_t, Result<HttpResponse>>> chunks;
  };
  auto completed = std::make_shared<Completed>();
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  const uint64_t count = (size + chunk_bytes - 1) / chunk_bytes;
  // Chunks submitted and not yet written: the bodies held stay within the memory budget.
  const uint64_t window = std::clamp<uint64_t>(max_memory() / chunk_bytes, 2, count);
  uint64_t submitted = 0, outstanding = 0;
  Status first_error;
  while (submitted < count || outstanding > 0) {
    while (first_error.is_ok() && submitted < count && outstanding < window) {
      HttpRequest r = object;
      r.method = "GET";
      r.offset = submitted * chunk_bytes;
      r.length = std::min(chunk_bytes, size - r.offset);
      r.sink_fd = fd;  // the engine writes the bytes as they arrive: no chunk-sized buffers
      r.sink_offset = r.offset;
      const uint64_t index = submitted;
      submit_cancellable(
          std::move(r),
          [completed, index](Result<HttpResponse> result) {
            std::lock_guard<std::mutex> lock(completed->mu);
            completed->chunks.emplace_back(index, std::move(result));
            completed->cv.notify_one();
          },
          cancel);
      ++submitted;
      ++outstanding;
    }
    if (outstanding == 0) break;
    std::unique_lock<std::mutex> lock(completed->mu);
    completed->cv.wait(lock, [&] { return !completed->chunks.empty(); });
    auto [index, result] = std::move(completed->chunks.front());
    completed->chunks.pop_front();
    lock.unlock();
    --outstanding;
    if (!first_error.is_ok()) continue;
    if (!result.is_ok()) {
      first_error = result.status();
      cancel->store(true);
      continue;
    }
    (void)index;  // written in place by the engine; a response is complete only with every byte written
  }
  return first_error;
}

}  // namespace chute
