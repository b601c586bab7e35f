// HttpEngine: chute's native HTTP(S) client for remote shards, on libcurl's multi interface.
//
// libcurl is loaded at run time (dlopen "libcurl.so.4", detail/curl_api.h), never linked: the wheel then
// bundles no OpenSSL, every Linux has libcurl.so.4, and without it only remote URLs fail (create() says so).
//
// One engine thread drives one curl multi handle, so every request shares its connection cache
// (keep-alive reuse; CURLMOPT_MAX_HOST_CONNECTIONS is the in-flight limit). Requests beyond the limit wait
// in a FIFO queue. A failed attempt that may succeed later (a transport error, a stall, a truncated body,
// 5xx, 429, S3's 503 SlowDown) is retried after an exponential backoff with full jitter, scheduled on the
// engine thread (never sleeping on it). The in-flight limit is fixed, or autotuned by Little's law from the
// measured throughput and latency (detail/http_policy.h, auto_in_flight_limit).
//
// Errors: 2xx (206 for a range) with the whole body is success. 404 is kNotFound "GET <url>: HTTP 404 ...";
// other 4xx are kIoError, not retried; after the retry budget kEnvironment "GET <url>: <last error> after N
// attempts over X s". A remote failure is never kCorruptData. Messages and stats carry redact_url()'s URL:
// credentials never appear in them. A conditional request (If-Match) answered 412 is not an error: the
// response says the object is no longer that version (download() and receive() read it again).
//
// Cancellation (chute/base/cancel.h): a request watches the CancelToken it was submitted with, by default
// the submitting thread's CancelScope. Once that token is cancelled, the request ends kCancelled within
// about 0.1 s wherever it is: in flight (its connection dropped), queued, or backing off before a retry.
// Ctrl-C in Python cancels the token of the call it interrupts (bindings.h, call_interruptibly).
//
// Thread-safety: every member is safe to call from any thread. Callbacks run on the engine thread.
// fork(): in a child, an engine made before the fork fails every request at once with kCancelled (its
// callback then runs on the caller's thread) and its destructor leaks it (chute/fork.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chute/base/cancel.h"
#include "chute/base/status.h"

namespace chute {

// AWS Signature V4, done by libcurl (CURLOPT_AWS_SIGV4 "aws:amz:<region>:<service>", the key and secret as
// CURLOPT_USERNAME / CURLOPT_PASSWORD, the session token as an x-amz-security-token header). For service
// "s3" the engine sends "x-amz-content-sha256: UNSIGNED-PAYLOAD" unless the request has that header (S3
// requires it; libcurl signs with the value given).
struct SigV4 {
  std::string access_key, secret_key, session_token, region = "us-east-1", service = "s3";
};

struct HttpRequest {
  std::string method = "GET";        // GET, HEAD, PUT, POST, DELETE
  std::string url;                   // http:// or https://
  std::vector<std::string> headers;  // "Name: value"
  // length > 0: a ranged GET of [offset, offset+length); the body must be exactly `length` bytes.
  uint64_t offset = 0, length = 0;
  std::vector<uint8_t> body;  // PUT/POST body
  std::optional<SigV4> sigv4;
  // A ranged GET's bytes written into this file at `sink_offset` as they arrive (pwrite, in pieces of up to
  // 512 KiB), not kept in the response (whose body then stays empty): no buffer the size of the range.
  // An error response's body is still kept (its S3 error code is read). -1: kept in memory.
  int sink_fd = -1;
  uint64_t sink_offset = 0;
  // This request's retry budget instead of the engine's (-1: the engine's), and a limit on each attempt's
  // whole time, connecting included (0: none; a stall still ends it). For the instance metadata service,
  // which answers within a second where it exists at all.
  int max_retries = -1;
  double timeout_s = 0;
  // What a 401/403 answer's error adds to "HTTP 403 <code>" (ObjectStore: whose credentials signed the
  // request, or which sources were tried when none did); empty: a plain "access denied".
  std::string denied_hint;
  // A ranged GET's bytes written to sink_buffer[0, length) as they arrive (the caller's memory, which must
  // outlive the request): no staging, no file, no buffer of the engine's. nullptr: none (see sink_fd).
  uint8_t* sink_buffer = nullptr;
};

struct HttpResponse {
  long status = 0;
  std::vector<uint8_t> body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  // The first header of that (lower-case) name.
  std::optional<std::string> header(std::string_view lower_name) const;
};

struct HttpOptions {
  int max_in_flight = 0;  // 0: auto (Little's law from measured latency and throughput), else fixed
  int max_auto_in_flight = 64;
  uint64_t max_memory = 256ull << 20;  // response bodies in flight at most (the autotuner's budget)
  int max_retries = 8;
  double backoff_base_s = 0.05, backoff_max_s = 5.0;    // exponential, full jitter
  double connect_timeout_s = 10, stall_timeout_s = 30;  // stall: no byte for this long (CURLOPT_LOW_SPEED_*)
};

// The version of an object that download() or receive() reads: every range of it comes from one version.
struct DownloadVersion {
  // In: the ETag the bytes must have (unquoted, as ObjectStore::stat() gives it); empty: whichever version
  // the first response is of. Out: the ETag of the bytes written (empty when the server sends none).
  std::string etag;
  // Out: the object no longer has the ETag asked for (the download then fails, naming both): whoever
  // listed it should stat() it again.
  bool changed = false;
};

struct HttpStats {
  uint64_t requests = 0, bytes = 0, retries = 0, failures = 0;  // requests: submitted; bytes: response bodies
  int in_flight = 0, in_flight_limit = 0;
  double latency_p50_s = 0, latency_p99_s = 0;  // time to the last byte, successful attempts (recent ones)
};

class HttpEngine {
 public:
  // kUnsupported naming libcurl.so.4 when it cannot be loaded; kInvalidArgument for bad options.
  static Result<std::shared_ptr<HttpEngine>> create(HttpOptions options = {});
  ~HttpEngine();  // outstanding requests end with kCancelled (their callbacks run); joins the engine thread
  HttpEngine(const HttpEngine&) = delete;
  HttpEngine& operator=(const HttpEngine&) = delete;

  using Callback = std::function<void(Result<HttpResponse>)>;
  // `done` runs exactly once, on the engine thread; it must not block (nor destroy the engine). Once
  // `cancel` is cancelled the request ends kCancelled (see above).
  void submit(HttpRequest request, Callback done, std::shared_ptr<const CancelToken> cancel = CancelScope::current());
  Result<HttpResponse> fetch(HttpRequest request);  // blocking; cancelled with the calling thread's scope
  // Object bytes [0, size) written into `fd` (pwrite) by parallel ranged GETs of `chunk_bytes`; every byte
  // checked to arrive, and every range from one version of the object: each carries If-Match on the
  // version's ETag once it is known (version.etag's from the first range; else the first answer's, as the
  // server spelled it; never a weak one, which If-Match does not match), and each answer's ETag and size
  // (Content-Range) are checked.
  //   - version.etag given: an object that no longer has it fails at once ("changed since it was listed",
  //     version.changed set);
  //   - version.etag empty: the first answer's version is read; an object that changes meanwhile is read
  //     again from the start, up to the retry budget, then fails naming the versions seen.
  // On error, the first chunk's error (the others are cancelled and waited for: nothing is written after
  // this returns); the file's content is then unspecified. Cancelled with the calling thread's scope.
  Status download(const HttpRequest& object, uint64_t size, int fd, DownloadVersion& version,
                  uint64_t chunk_bytes = 8ull << 20);
  // The same into `dst` (the object's dst.size() bytes), each range written in place as it arrives
  // (HttpRequest::sink_buffer): memory the caller reuses, nothing staged or written to a file
  // (docs/REMOTE.md: a fresh page per byte is what a cold epoch cannot afford). Every range is submitted at
  // once (the engine's in-flight limit paces them).
  Status receive(const HttpRequest& object, std::span<uint8_t> dst, DownloadVersion& version,
                 uint64_t chunk_bytes = 8ull << 20);
  HttpStats stats() const;
  const HttpOptions& options() const;

  struct Impl;

 private:
  explicit HttpEngine(std::unique_ptr<Impl> impl);
  // download() (into `fd`) or receive() (into `dst`, when not null): passes over the object until one reads
  // a single version.
  Status read_ranges(const HttpRequest& object, uint64_t size, int fd, uint8_t* dst, uint64_t chunk_bytes,
                     DownloadVersion& version);
  // One pass; ok, or the reason it must start again (set in *restart).
  Status read_pass(const HttpRequest& object, uint64_t size, int fd, uint8_t* dst, uint64_t chunk_bytes,
                   DownloadVersion& version, bool pinned, std::string* restart);
  void wake_for_cancel();  // the engine thread looks for cancelled requests now, not at its next sweep
  std::unique_ptr<Impl> impl_;
};

// The URL with credentials removed (userinfo, X-Amz-Signature/X-Amz-Credential/X-Amz-Security-Token query
// values), for messages.
std::string redact_url(std::string_view url);

}  // namespace chute
