// HttpEngine::download and HttpEngine::receive: an object into a file, or into the caller's memory in
// place, by parallel ranged GETs, every range from one version of it (the engine itself: http_engine.cc).

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "chute/remote/http_engine.h"
#include "chute/remote/s3_protocol.h"
#include "remote/detail/http_policy.h"

namespace chute {
namespace {

// "HTTP 412", "ETag \"a\" then \"b\"": why the bytes received so far are not all of one version; empty
// when this answer fits. Learns the version from the first answer when none is known yet.
std::string check_version(const HttpResponse& r, uint64_t size, DownloadVersion& version, std::string& if_match) {
  if (r.status == 412) return "HTTP 412 Precondition Failed (If-Match " + if_match + ")";
  std::optional<uint64_t> total;
  if (auto range = r.header("content-range")) {
    total = detail::content_range_total(*range);
  } else if (auto length = r.header("content-length"); length && r.status == 200) {
    total = std::strtoull(length->c_str(), nullptr, 10);  // the whole object (the server ignored Range)
  }
  if (total && *total != size) {
    return "its size is now " + std::to_string(*total) + " bytes, not " + std::to_string(size);
  }
  const std::optional<std::string> header = r.header("etag");
  if (!header) return {};  // a server that sends no ETag cannot be pinned (the size is still checked)
  const std::string etag = unquote_etag(*header);
  if (version.etag.empty()) version.etag = etag;
  if (etag != version.etag) return "ETag \"" + version.etag + "\", then \"" + etag + "\"";
  if (if_match.empty() && !header->starts_with("W/")) if_match = *header;  // as sent: the server's own spelling
  return {};
}

}  // namespace

Status HttpEngine::download(const HttpRequest& object, uint64_t size, int fd, DownloadVersion& version,
                            uint64_t chunk_bytes) {
  return read_ranges(object, size, fd, nullptr, chunk_bytes, version);
}

Status HttpEngine::receive(const HttpRequest& object, std::span<uint8_t> dst, DownloadVersion& version,
                           uint64_t chunk_bytes) {
  return read_ranges(object, dst.size(), -1, dst.data(), chunk_bytes, version);
}

Status HttpEngine::read_ranges(const HttpRequest& object, uint64_t size, int fd, uint8_t* dst, uint64_t chunk_bytes,
                               DownloadVersion& version) {
  if (chunk_bytes == 0) return invalid_argument("download: chunk_bytes must be > 0");
  version.changed = false;
  if (size == 0) return Status::ok();
  const std::string wanted = version.etag;
  const std::string what = "GET " + redact_url(object.url);
  std::string changes;  // the versions seen, for the error
  for (int pass = 0;; ++pass) {
    std::string restart;
    const Status st = read_pass(object, size, fd, dst, chunk_bytes, version, !wanted.empty(), &restart);
    if (!st.is_ok() || restart.empty()) return st;
    changes += (changes.empty() ? "" : "; ") + restart;
    if (!wanted.empty()) {
      // Its bytes are no longer those whoever listed it (and keyed them by their ETag) meant.
      version.changed = true;
      return io_error(what + ": the object changed since it was listed (" + restart + ")");
    }
    if (pass >= options().max_retries) {
      return environment_error(what + ": the object changed while it was read, " + std::to_string(pass + 1) +
                               " times (" + changes + "): a mix of versions is never kept");
    }
    version.etag.clear();  // read it again from the start, whichever version it is now
  }
}

Status HttpEngine::read_pass(const HttpRequest& object, uint64_t size, int fd, uint8_t* dst, uint64_t chunk_bytes,
                             DownloadVersion& version, bool pinned, std::string* restart) {
  // Each chunk is written by the engine as it arrives: into `dst` in place (HttpRequest::sink_buffer), or
  // into `fd` in pieces of at most 512 KiB (sink_fd), so a pass holds no chunk-sized buffers: with 32
  // requests of 8 MiB in flight, and a download per fetch thread, those would be up to a gigabyte beside the
  // loader's own memory. Completions come back to this thread, which keeps the requests in flight and checks
  // each answer's version: the ranges submitted once the version is known carry If-Match on its ETag.
  struct Completed {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Result<HttpResponse>> chunks;
  };
  auto completed = std::make_shared<Completed>();
  // The chunks end with the caller's cancellation, or with this pass's (its first failure).
  auto cancel = CancelToken::make(CancelScope::current());
  std::string if_match = pinned && !version.etag.starts_with("W/") ? "\"" + version.etag + "\"" : std::string();
  const uint64_t count = (size + chunk_bytes - 1) / chunk_bytes;
  // Into a file: chunks submitted and not yet written stay within the memory budget (each stages up to
  // 512 KiB). Into memory nothing is held but `dst`: every range at once, paced by the in-flight limit.
  const uint64_t window = dst != nullptr ? count : std::clamp<uint64_t>(options().max_memory / chunk_bytes, 2, count);
  uint64_t submitted = 0, outstanding = 0;
  Status first_error;
  const auto stop = [&](Status why) {
    first_error = std::move(why);
    cancel->cancel();
    wake_for_cancel();
  };
  while (submitted < count || outstanding > 0) {
    while (first_error.is_ok() && restart->empty() && submitted < count && outstanding < window) {
      HttpRequest r = object;
      r.method = "GET";
      r.offset = submitted * chunk_bytes;
      r.length = std::min(chunk_bytes, size - r.offset);
      if (dst != nullptr) {
        r.sink_buffer = dst + r.offset;
      } else {
        r.sink_fd = fd;
        r.sink_offset = r.offset;
      }
      if (!if_match.empty()) r.headers.push_back("If-Match: " + if_match);
      submit(
          std::move(r),
          [completed](Result<HttpResponse> result) {
            std::lock_guard<std::mutex> lock(completed->mu);
            completed->chunks.push_back(std::move(result));
            completed->cv.notify_one();
          },
          cancel);
      ++submitted;
      ++outstanding;
    }
    if (outstanding == 0) break;
    std::unique_lock<std::mutex> lock(completed->mu);
    completed->cv.wait(lock, [&] { return !completed->chunks.empty(); });
    Result<HttpResponse> result = std::move(completed->chunks.front());
    completed->chunks.pop_front();
    lock.unlock();
    --outstanding;
    if (!first_error.is_ok() || !restart->empty()) continue;  // the rest only drains
    if (!result.is_ok()) {
      stop(result.status());
      continue;
    }
    // A range's bytes are in place once its answer is complete; a range of another version means the
    // destination holds a mix: the pass stops, and the object is read again from the start.
    if (std::string why = check_version(result.value(), size, version, if_match); !why.empty()) {
      *restart = std::move(why);
      cancel->cancel();
      wake_for_cancel();
    }
  }
  if (!restart->empty()) return Status::ok();
  return first_error;
}

}  // namespace chute
