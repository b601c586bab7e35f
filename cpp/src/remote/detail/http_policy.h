// The HTTP engine's decisions, as pure functions of what it measured, so that tests pin them without a
// server or a clock: what an attempt's outcome means (done, retry, fail), how long to back off, and how
// deep the I/O queue should be (Little's law). http_engine.cc calls them; http_engine_test.cc tests them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chute/base/status.h"
#include "chute/remote/http_engine.h"

namespace chute::detail {

// ---- Outcome of one attempt ----------------------------------------------------------------------
enum class Verdict { kDone, kRetry, kFail };
struct AttemptCheck {
  Verdict verdict = Verdict::kDone;
  StatusCode code = StatusCode::kOk;  // for kFail: kNotFound (404), kIoError (other 4xx), kInvalidArgument
  std::string reason;                 // "HTTP 503 SlowDown", "truncated body: 100 of 200 bytes", ...
};

// What arrived for a transfer that libcurl completed without a transport error.
struct ResponseFacts {
  long status = 0;
  bool head = false;
  uint64_t range_offset = 0, range_length = 0;  // the request's range (length 0: the whole object)
  std::optional<uint64_t> content_length;       // Content-Length, when sent (and no Content-Encoding)
  std::optional<uint64_t> range_total;          // Content-Range's "/total", when sent
  uint64_t body_size = 0;
  std::string_view body;         // for the S3 error <Code>, on errors
  bool conditional = false;      // the request carried If-Match
  std::string_view denied_hint;  // HttpRequest::denied_hint
};
// 2xx with the whole body: kDone. 412 to a conditional request: kDone (the answer: another version). A body shorter
// than Content-Length or than the requested range: kRetry (truncated). 5xx and 429: kRetry. 404: kFail kNotFound. A
// range that ends past the object (206 up to its end, or 416): kFail kInvalidArgument. 401/403: kFail kIoError with the
// denied hint (or "access denied"). Other statuses: kFail kIoError.
AttemptCheck check_response(const ResponseFacts& facts);
// A transport error (libcurl's code and message): kRetry, except a malformed or unsupported URL.
AttemptCheck check_transport(int curl_code, std::string_view message);

// `message` with the request's credentials replaced by ***: its SigV4 secret key, session token and access
// key, and the URL's userinfo (and password). Strings shorter than 4 characters are left (too common).
std::string scrub_secrets(std::string message, const HttpRequest& request);
// Whether `headers` ("Name: value") has one named `lower_name` (lower-case), in any case.
bool has_header(const std::vector<std::string>& headers, std::string_view lower_name);

// The <Code> of an S3-style XML error body ("SlowDown", "NoSuchKey"), empty when there is none.
std::string s3_error_code(std::string_view body);
// "bytes 0-99/1000" -> 1000; nullopt when absent or "*".
std::optional<uint64_t> content_range_total(std::string_view content_range);

// ---- Backoff -------------------------------------------------------------------------------------
// Exponential backoff with full jitter (AWS architecture blog, "Exponential Backoff And Jitter"): before
// retry number `retry` (0 for the first), wait u * min(max_s, base_s * 2^retry), u uniform in [0, 1).
double backoff_delay_s(int retry, double base_s, double max_s, double u01);
// A 429 or 503 answer's Retry-After (RFC 9110 10.2.3): delta-seconds ("120") or an HTTP-date
// ("Wed, 21 Oct 2015 07:28:00 GMT", taken against `now`, the Unix time), in seconds from now, at least 0;
// nullopt when it is neither. The engine waits the longer of it (at most kMaxRetryAfterS) and its backoff.
std::optional<double> retry_after_s(std::string_view value, int64_t now);
constexpr double kMaxRetryAfterS = 60.0;  // a server asking for longer is retried after a minute

// ---- I/O depth (Little's law) --------------------------------------------------------------------
// One measurement window of the engine, closed every ~0.25 s with at least a few completed attempts.
struct DepthWindow {
  int limit = 0;               // the in-flight limit during the window
  double throughput_bps = 0;   // body bytes/s completed while requests waited in the queue
  double latency_p50_s = 0;    // median time to last byte of the window's successful attempts
  double mean_body_bytes = 0;  // mean body size of those attempts
  bool queue_waited = false;   // requests waited for a slot during the window
};
constexpr int kMinAutoInFlight = 4;
// The next in-flight limit (HttpOptions::max_in_flight == 0).
//   - Little's law: L = X * W. The depth that sustains the measured rate X (requests/s = bytes/s / mean
//     body) at the measured latency W is ceil(X * W); keep a margin of max(2, 25%) on top.
//   - While requests wait in the queue, demand exceeds that rate: if the rate rose with the last increase
//     of depth by more than 10% (or there was none yet), double the depth, or take Little's depth if that
//     is more; if it did not (the link or the server is the limit: more depth only adds latency), hold.
//   - When nothing waits, Little's depth plus the margin is enough: shrink to it, not below the floor.
//   - Bounds: at most max_auto_in_flight and max_memory / mean body (the bodies in flight stay within the
//     memory budget), but at least kMinAutoInFlight (or max_auto_in_flight, when that is smaller).
// `previous` is the window before (nullptr for the first).
int auto_in_flight_limit(const DepthWindow& now, const DepthWindow* previous, const HttpOptions& options);

}  // namespace chute::detail
