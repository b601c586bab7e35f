// One request of the HTTP engine through its attempts, and what one attempt does with a libcurl easy
// handle: its set-up (method, range, body, headers, SigV4 or redirects, timeouts), the body and header
// callbacks (a ranged GET with a sink writes its bytes as they arrive: into the caller's memory in place, or
// into the sink file in pieces of up to kSinkStage), and what arrived, checked (detail/http_policy.h: done, retry or
// fail). The engine (http_engine.cc) queues transfers, drives their attempts on its multi handle, and retries, fails or
// finishes them.
// Thread-safety: a Transfer belongs to the engine thread (libcurl's callbacks run there too).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chute/base/status.h"
#include "chute/remote/http_engine.h"
#include "remote/detail/curl_api.h"
#include "remote/detail/http_policy.h"

namespace chute::detail {

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Sink bytes written per pwrite(): libcurl hands the body over in pieces of at most 16 KiB
// (CURL_MAX_WRITE_SIZE), and a pwrite() per piece cost ext4 ~3x the CPU per byte of writes of 256 KiB and
// more (measured: 0.49 against 0.22 ms/MB).
constexpr size_t kSinkStage = 512 << 10;

// One request, through its attempts. Lives in exactly one of the engine's containers at a time.
struct Transfer {
  HttpRequest request;
  HttpEngine::Callback done;
  std::shared_ptr<const CancelToken> cancel;  // once cancelled, the engine ends the request (kCancelled)
  std::string what;                           // "GET <redacted url>", for messages
  int attempts = 0;
  Clock::time_point first_start, attempt_start;
  // The current attempt.
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string range, provider;
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = {};
  long status_line = 0;         // the status of the response being received (its status line)
  uint64_t received = 0;        // body bytes seen this attempt (a sink's count; kept bodies have their size)
  std::string sink_error;       // a write into the sink failed: the attempt fails with this
  std::vector<uint8_t> staged;  // sink bytes not yet written, for the file offset `staged_at` on
  uint64_t staged_at = 0;

  bool cancelled() const { return cancel != nullptr && cancel->cancelled(); }
  // Whether this attempt's body goes to the request's sink: a ranged GET with a sink, answered 2xx.
  bool sinks() const;

  // A new attempt: a fresh easy handle set up for the request, in `easy`, ready for curl_multi_add_handle.
  // Not ok when it cannot start (not an http(s) URL, an offset without a length: kInvalidArgument; libcurl
  // out of memory: kEnvironment), with nothing left allocated.
  Status begin_attempt(const CurlApi& api, const HttpOptions& options);
  // The attempt's easy handle and header list freed (once libcurl has let go of them).
  void end_attempt(const CurlApi& api);
  // A completed attempt (libcurl's `code`, the handle out of the multi handle): its response status read,
  // the sink's last bytes written, the handle freed, and what the attempt came to.
  AttemptCheck check_attempt(const CurlApi& api, CURLcode code);
  // A successful attempt's response, for the caller: of a ranged GET that the server answered with the whole
  // object (200, no sink), the range's part.
  HttpResponse take_response();
};

}  // namespace chute::detail
