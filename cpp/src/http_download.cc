// HttpEngine::download: an object into a file by parallel ranged GETs (the engine itself: http_engine.cc).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "chute/http_engine.h"

namespace chute {

Status HttpEngine::download(const HttpRequest& object, uint64_t size, int fd, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return invalid_argument("download: chunk_bytes must be > 0");
  if (size == 0) return Status::ok();
  // Completed chunks come back to this thread, which writes them: the engine thread never waits on the disk.
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
    const uint64_t offset = index * chunk_bytes;
    const uint64_t expected = std::min(chunk_bytes, size - offset);
    const std::vector<uint8_t>& body = result->body;
    if (body.size() != expected) {  // check_response guarantees it; a bug otherwise
      first_error = Status(StatusCode::kIoError, "GET " + redact_url(object.url) + ": bytes [" +
                                                     std::to_string(offset) + ", " + std::to_string(offset + expected) +
                                                     ") arrived as " + std::to_string(body.size()) + " bytes");
      cancel->store(true);
      continue;
    }
    for (uint64_t done = 0; done < expected;) {
      ssize_t n = ::pwrite(fd, body.data() + done, expected - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        first_error = Status(err == ENOSPC || err == EDQUOT ? StatusCode::kEnvironment : StatusCode::kIoError,
                             "download of " + redact_url(object.url) + ": writing bytes at " +
                                 std::to_string(offset + done) + ": " + std::strerror(err));
        cancel->store(true);
        break;
      }
      done += static_cast<uint64_t>(n);
    }
  }
  return first_error;
}

}  // namespace chute
