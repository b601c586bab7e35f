#include "chute/remote/http_engine.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "chute/base/fork.h"
#include "chute/base/thread.h"
#include "remote/detail/curl_api.h"
#include "remote/detail/http_policy.h"

namespace chute {

std::optional<std::string> HttpResponse::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

namespace {
using namespace detail;
using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr size_t kLatencySamples = 1024;  // the recent successful attempts behind latency p50/p99
constexpr double kWindowS = 0.25;         // the autotuner's measurement window
constexpr int kWindowMinCompletions = 4;
constexpr uint64_t kMaxReserve = 64ull << 20;  // a Content-Length reserved up front at most (a claim, not bytes)

// One request, through its attempts. Lives in exactly one of the engine's containers at a time.
struct Transfer {
  HttpRequest request;
  HttpEngine::Callback done;
  std::shared_ptr<std::atomic<bool>> cancel;  // set: ends kCancelled instead of starting another attempt
  std::string what;                           // "GET <redacted url>", for messages
  int attempts = 0;
  Clock::time_point first_start, attempt_start;
  // The current attempt.
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string range, provider;
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = {};
  long status_line = 0;    // the status of the response being received (its status line)
  uint64_t received = 0;   // body bytes seen this attempt (a sink's count; kept bodies have their size)
  std::string sink_error;  // a write into the sink failed: the attempt fails with this
  // Sink bytes not yet written, for the file offset `staged_at` on: libcurl hands the body over in pieces
  // of at most 16 KiB (CURL_MAX_WRITE_SIZE), and a pwrite() per piece cost ext4 ~3x the CPU per byte of
  // writes of 256 KiB and more (measured: 0.49 against 0.22 ms/MB); kSinkStage bytes go in one pwrite().
  std::vector<uint8_t> staged;
  uint64_t staged_at = 0;
};

constexpr size_t kSinkStage = 512 << 10;
constexpr int kMaxRedirects = 8;

// Writes the staged bytes into the sink; false (with sink_error set) when the write fails.
bool flush_sink(Transfer& t) {
  for (size_t done = 0; done < t.staged.size();) {
    const ssize_t w = ::pwrite(t.request.sink_fd, t.staged.data() + done, t.staged.size() - done,
                               static_cast<off_t>(t.staged_at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      t.sink_error =
          std::string("writing at ") + std::to_string(t.staged_at + done) + ": " + std::strerror(w < 0 ? errno : EIO);
      return false;
    }
    done += static_cast<size_t>(w);
  }
  t.staged_at += t.staged.size();
  t.staged.clear();
  return true;
}

// Whether this attempt's body goes to the request's sink: a ranged GET with a sink, answered 2xx.
bool sinks(const Transfer& t) {
  return t.request.sink_fd >= 0 && t.request.length > 0 && t.status_line >= 200 && t.status_line < 300;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (!sinks(*t)) {
    t->response.body.insert(t->response.body.end(), data, data + bytes);
    return bytes;
  }
  // 206: the body is the range. 200: the whole object (the server ignored Range): keep the range's part.
  const uint64_t begin = t->status_line == 200 ? t->request.offset : 0;
  const uint64_t end = begin + t->request.length;
  const uint64_t from = std::max(t->received, begin), to = std::min(t->received + bytes, end);
  if (from < to) {
    const uint64_t at = t->request.sink_offset + (from - begin);
    if (t->staged.empty()) {
      t->staged_at = at;
      t->staged.reserve(kSinkStage);
    } else if (at != t->staged_at + t->staged.size()) {  // not contiguous (the range's bytes come in order)
      if (!flush_sink(*t)) return 0;                     // curl ends the transfer (CURLE_WRITE_ERROR)
      t->staged_at = at;
    }
    t->staged.insert(t->staged.end(), data + (from - t->received), data + (to - t->received));
    if (t->staged.size() >= kSinkStage && !flush_sink(*t)) return 0;
  }
  t->received += bytes;
  return bytes;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) {  // a new response (after 100 Continue or a redirect): start over
    t->response.headers.clear();
    t->response.body.clear();  // a redirect's own body is not the object's
    t->received = 0;
    t->staged.clear();
    const size_t space = line.find(' ');
    t->status_line =
        space == std::string_view::npos ? 0 : std::strtol(std::string(line.substr(space + 1, 3)).c_str(), nullptr, 10);
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (name == "content-length" && t->request.method != "HEAD") {
    uint64_t len = std::strtoull(std::string(value).c_str(), nullptr, 10);
    t->response.body.reserve(std::min<uint64_t>(len, kMaxReserve));
  }
  t->response.headers.emplace_back(std::move(name), std::string(value));
  return size * n;
}

}  // namespace

struct HttpEngine::Impl {
  const CurlApi& api;
  const HttpOptions options;
  const ForkMark fork_mark;  // in a forked child the engine thread is not there: every call fails (fork.h)
  CURLM* multi = nullptr;
  std::thread thread;

  mutable std::mutex mu;
  std::deque<std::unique_ptr<Transfer>> incoming;  // guarded by mu
  bool stopping = false;                           // guarded by mu

  // Engine thread only.
  std::deque<std::unique_ptr<Transfer>> queue;
  std::multimap<Clock::time_point, std::unique_ptr<Transfer>> backing_off;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active;
  int limit = 0;
  std::mt19937_64 rng{std::random_device{}()};
  // The autotuner's current window.
  Clock::time_point window_start, last_tick;
  bool queue_waiting = false, window_queue_waited = false;
  double busy_s = 0;
  uint64_t busy_bytes = 0, window_bytes = 0, tick_bytes = 0;
  std::vector<double> window_latencies;
  std::optional<DepthWindow> previous_window;

  std::atomic<uint64_t> requests{0}, bytes{0}, retries{0}, failures{0};
  std::atomic<int> in_flight{0}, in_flight_limit{0};
  mutable std::mutex latency_mu;
  std::vector<double> latencies;  // ring of kLatencySamples, guarded by latency_mu
  size_t latency_next = 0;        // guarded by latency_mu

  Impl(const CurlApi& a, HttpOptions o) : api(a), options(std::move(o)) {}

  void enqueue(HttpRequest request, HttpEngine::Callback done, std::shared_ptr<std::atomic<bool>> cancel) {
    if (fork_mark.in_child()) return done(fork_mark.child_error("HTTP engine"));
    auto t = std::make_unique<Transfer>();
    t->what = request.method + " " + redact_url(request.url);
    t->request = std::move(request);
    t->done = std::move(done);
    t->cancel = std::move(cancel);
    requests.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu);
      incoming.push_back(std::move(t));
    }
    api.curl_multi_wakeup(multi);
  }

  void set_limit(int n) {
    limit = n;
    in_flight_limit.store(n, std::memory_order_relaxed);
    api.curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(n));
  }

  void finish(std::unique_ptr<Transfer> t, Result<HttpResponse> result) {
    if (!result.is_ok()) failures.fetch_add(1, std::memory_order_relaxed);
    HttpEngine::Callback done = std::move(t->done);
    t.reset();
    done(std::move(result));
  }

  void fail(std::unique_ptr<Transfer> t, StatusCode code, const std::string& reason) {
    std::string message = scrub_secrets(t->what + ": " + reason, t->request);
    finish(std::move(t), Status(code, std::move(message)));
  }

  bool cancelled(const Transfer& t) const { return t.cancel && t.cancel->load(std::memory_order_relaxed); }

  void start(std::unique_ptr<Transfer> t) {
    if (cancelled(*t)) return fail(std::move(t), StatusCode::kCancelled, "cancelled");
    const HttpRequest& r = t->request;
    if (!r.url.starts_with("http://") && !r.url.starts_with("https://")) {
      return fail(std::move(t), StatusCode::kInvalidArgument, "not an http:// or https:// URL");
    }
    if (r.length == 0 && r.offset != 0) {
      return fail(std::move(t), StatusCode::kInvalidArgument,
                  "offset " + std::to_string(r.offset) + " without a length (length > 0 selects a range)");
    }
    CURL* e = api.curl_easy_init();
    if (e == nullptr)
      return fail(std::move(t), StatusCode::kEnvironment, "libcurl cannot create a handle (out of memory)");
    t->easy = e;
    t->response = HttpResponse{};
    t->error[0] = '\0';
    t->status_line = 0;
    t->received = 0;
    t->sink_error.clear();
    t->staged.clear();  // a failed attempt's unwritten bytes: the retry writes its range again
    if (t->attempts++ == 0) t->first_start = Clock::now();
    t->attempt_start = Clock::now();
    api.curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
    api.curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    api.curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    api.curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L << 10);
    api.curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
    api.curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
    api.curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    api.curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
    api.curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    api.curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout_s * 1000));
    api.curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    api.curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, std::max(1L, std::lround(std::ceil(options.stall_timeout_s))));
    std::vector<std::string> headers = r.headers;
    if (r.method == "HEAD") {
      api.curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (r.method != "GET") {
      api.curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    if (r.method == "PUT" || r.method == "POST" || !r.body.empty()) {
      static const char kEmpty[1] = {0};
      api.curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      api.curl_easy_setopt(e, CURLOPT_POSTFIELDS,
                           r.body.empty() ? kEmpty : reinterpret_cast<const char*>(r.body.data()));
      if (!has_header(headers, "content-type")) headers.push_back("Content-Type: application/octet-stream");
    }
    if (r.length > 0) {
      t->range = std::to_string(r.offset) + "-" + std::to_string(r.offset + r.length - 1);
      api.curl_easy_setopt(e, CURLOPT_RANGE, t->range.c_str());
      if (r.sink_fd < 0) t->response.body.reserve(r.length);
    }
    if (!r.sigv4) {
      // Plain HTTP(S) follows redirects (the Hugging Face Hub answers a file's URL with a 302 to its
      // CDN; a Range header goes along), to http(s) only. A signed request does not: its signature names
      // the host, and S3's 301 (a bucket in another region) is an error that says so.
      api.curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
      api.curl_easy_setopt(e, CURLOPT_MAXREDIRS, static_cast<long>(kMaxRedirects));
      api.curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, kCurlProtoHttp | kCurlProtoHttps);
    } else {
      t->provider = "aws:amz:" + r.sigv4->region + ":" + r.sigv4->service;
      api.curl_easy_setopt(e, CURLOPT_AWS_SIGV4, t->provider.c_str());
      api.curl_easy_setopt(e, CURLOPT_USERNAME, r.sigv4->access_key.c_str());
      api.curl_easy_setopt(e, CURLOPT_PASSWORD, r.sigv4->secret_key.c_str());
      if (!r.sigv4->session_token.empty()) headers.push_back("x-amz-security-token: " + r.sigv4->session_token);
      // S3 wants the payload's hash as a header; libcurl signs with that header's value when one is given
      // (and hashes the body, without sending the header, when none is).
      if (r.sigv4->service == "s3" && !has_header(headers, "x-amz-content-sha256")) {
        headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
      }
    }
    for (const std::string& h : headers) {
      curl_slist* next = api.curl_slist_append(t->headers, h.c_str());
      if (next == nullptr) {
        end_attempt(*t);
        return fail(std::move(t), StatusCode::kEnvironment, "libcurl: out of memory");
      }
      t->headers = next;
    }
    if (t->headers != nullptr) api.curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    if (CURLMcode m = api.curl_multi_add_handle(multi, e); m != CURLM_OK) {
      std::string why = api.curl_multi_strerror(m);
      end_attempt(*t);
      return fail(std::move(t), StatusCode::kEnvironment, "libcurl cannot start the request: " + why);
    }
    active.emplace(e, std::move(t));
    in_flight.store(static_cast<int>(active.size()), std::memory_order_relaxed);
  }

  void end_attempt(Transfer& t) {
    if (t.easy != nullptr) api.curl_easy_cleanup(t.easy);
    if (t.headers != nullptr) api.curl_slist_free_all(t.headers);
    t.easy = nullptr;
    t.headers = nullptr;
  }

  // A completed attempt (libcurl's CURLMSG_DONE): done, retried after a backoff, or failed.
  void complete(CURL* e, CURLcode code) {
    auto it = active.find(e);
    if (it == active.end()) return;
    std::unique_ptr<Transfer> t = std::move(it->second);
    active.erase(it);
    in_flight.store(static_cast<int>(active.size()), std::memory_order_relaxed);
    api.curl_multi_remove_handle(multi, e);
    long status = 0;
    api.curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    t->response.status = status;
    end_attempt(*t);
    const Clock::time_point now = Clock::now();
    AttemptCheck check;
    if (code == CURLE_OK && sinks(*t) && !flush_sink(*t))  // the body's last bytes
      return fail(std::move(t), StatusCode::kIoError, t->sink_error);
    if (code != CURLE_OK) {
      if (!t->sink_error.empty()) return fail(std::move(t), StatusCode::kIoError, t->sink_error);
      std::string message = t->error[0] != '\0' ? std::string(t->error) : api.curl_easy_strerror(code);
      check = check_transport(code, message);
    } else {
      const HttpRequest& r = t->request;
      ResponseFacts f;
      f.status = status;
      f.head = r.method == "HEAD";
      f.range_offset = r.offset;
      f.range_length = r.length;
      if (auto cl = t->response.header("content-length"); cl && !t->response.header("content-encoding")) {
        f.content_length = std::strtoull(cl->c_str(), nullptr, 10);
      }
      if (auto cr = t->response.header("content-range")) f.range_total = content_range_total(*cr);
      f.body_size = sinks(*t) ? t->received : t->response.body.size();
      f.body = std::string_view(reinterpret_cast<const char*>(t->response.body.data()), t->response.body.size());
      check = check_response(f);
    }
    if (check.verdict == Verdict::kDone) {
      HttpResponse response = std::move(t->response);
      if (t->request.length > 0 && status == 200 && !sinks(*t)) {  // the whole object came: keep the range
        auto begin = response.body.begin() + static_cast<ptrdiff_t>(t->request.offset);
        response.body = std::vector<uint8_t>(begin, begin + static_cast<ptrdiff_t>(t->request.length));
      }
      record_success(seconds(now - t->attempt_start), sinks(*t) ? t->request.length : response.body.size());
      return finish(std::move(t), std::move(response));
    }
    if (check.verdict == Verdict::kFail) return fail(std::move(t), check.code, check.reason);
    if (cancelled(*t)) return fail(std::move(t), StatusCode::kCancelled, "cancelled after: " + check.reason);
    if (t->attempts > options.max_retries) {
      char over[32];
      std::snprintf(over, sizeof(over), "%.2f", seconds(now - t->first_start));
      return fail(std::move(t), StatusCode::kEnvironment,
                  check.reason + " after " + std::to_string(t->attempts) + " attempts over " + over + " s");
    }
    retries.fetch_add(1, std::memory_order_relaxed);
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    double delay = backoff_delay_s(t->attempts - 1, options.backoff_base_s, options.backoff_max_s, u);
    if (auto after = t->response.header("retry-after"); after && (status == 429 || status == 503)) {
      // The server said when to come back: not sooner (up to a minute), whatever the backoff says.
      if (auto wait = retry_after_s(*after, static_cast<int64_t>(std::time(nullptr))))
        delay = std::max(delay, std::min(*wait, kMaxRetryAfterS));
    }
    auto due = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay));
    backing_off.emplace(due, std::move(t));
  }

  void record_success(double latency_s, uint64_t body_bytes) {
    bytes.fetch_add(body_bytes, std::memory_order_relaxed);
    tick_bytes += body_bytes;
    window_latencies.push_back(latency_s);
    std::lock_guard<std::mutex> lock(latency_mu);
    if (latencies.size() < kLatencySamples) {
      latencies.push_back(latency_s);
    } else {
      latencies[latency_next] = latency_s;
    }
    latency_next = (latency_next + 1) % kLatencySamples;
  }

  // The autotuner's bookkeeping, once per loop turn; closes a window every kWindowS.
  void tick(Clock::time_point now) {
    const double dt = seconds(now - last_tick);
    last_tick = now;
    window_bytes += tick_bytes;
    if (queue_waiting) {  // the queue was non-empty through this turn: the rate measured is the demand met
      busy_s += dt;
      busy_bytes += tick_bytes;
    }
    tick_bytes = 0;
    queue_waiting = !queue.empty();
    window_queue_waited = window_queue_waited || queue_waiting;
    const double window_s = seconds(now - window_start);
    if (options.max_in_flight > 0 || window_s < kWindowS ||
        window_latencies.size() < static_cast<size_t>(kWindowMinCompletions)) {
      return;
    }
    DepthWindow w;
    w.limit = limit;
    w.throughput_bps = busy_s > 0 ? busy_bytes / busy_s : window_bytes / window_s;
    std::nth_element(window_latencies.begin(), window_latencies.begin() + window_latencies.size() / 2,
                     window_latencies.end());
    w.latency_p50_s = window_latencies[window_latencies.size() / 2];
    w.mean_body_bytes = static_cast<double>(window_bytes) / window_latencies.size();
    w.queue_waited = window_queue_waited;
    const int next = auto_in_flight_limit(w, previous_window ? &*previous_window : nullptr, options);
    if (next != limit) set_limit(next);
    previous_window = w;
    window_start = now;
    busy_s = 0;
    busy_bytes = window_bytes = 0;
    window_latencies.clear();
    window_queue_waited = false;
  }

  void run() {
    window_start = last_tick = Clock::now();
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) break;
        for (auto& t : incoming) queue.push_back(std::move(t));
        incoming.clear();
      }
      Clock::time_point now = Clock::now();
      // Retries that are due go first: they have waited longest.
      std::vector<std::unique_ptr<Transfer>> due;
      while (!backing_off.empty() && backing_off.begin()->first <= now) {
        due.push_back(std::move(backing_off.begin()->second));
        backing_off.erase(backing_off.begin());
      }
      for (auto it = due.rbegin(); it != due.rend(); ++it) queue.push_front(std::move(*it));
      while (static_cast<int>(active.size()) < limit && !queue.empty()) {
        std::unique_ptr<Transfer> t = std::move(queue.front());
        queue.pop_front();
        start(std::move(t));
      }
      int running = 0;
      api.curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* msg = api.curl_multi_info_read(multi, &left)) {
        if (msg->msg == CURLMSG_DONE) complete(msg->easy_handle, msg->data.result);
      }
      now = Clock::now();
      tick(now);
      if (!queue.empty() && static_cast<int>(active.size()) < limit) continue;
      int timeout_ms = 1000;
      if (!backing_off.empty()) {
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(backing_off.begin()->first - now).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(wait + 1, 0, timeout_ms));
      }
      api.curl_multi_poll(multi, nullptr, 0, timeout_ms, nullptr);
    }
    // Stopping: every outstanding request ends kCancelled.
    for (auto& [e, t] : active) {
      api.curl_multi_remove_handle(multi, e);
      end_attempt(*t);
    }
    std::vector<std::unique_ptr<Transfer>> outstanding;
    for (auto& [e, t] : active) outstanding.push_back(std::move(t));
    active.clear();
    in_flight.store(0, std::memory_order_relaxed);
    for (auto& t : queue) outstanding.push_back(std::move(t));
    for (auto& [due, t] : backing_off) outstanding.push_back(std::move(t));
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& t : incoming) outstanding.push_back(std::move(t));
      incoming.clear();
    }
    for (auto& t : outstanding) fail(std::move(t), StatusCode::kCancelled, "cancelled: the HTTP engine was closed");
  }
};

Result<std::shared_ptr<HttpEngine>> HttpEngine::create(HttpOptions options) {
  if (options.max_in_flight < 0 || options.max_auto_in_flight < 1 || options.max_retries < 0 ||
      options.backoff_base_s < 0 || options.backoff_max_s < 0 || options.connect_timeout_s <= 0 ||
      options.stall_timeout_s <= 0) {
    return invalid_argument(
        "HttpOptions: max_in_flight >= 0, max_auto_in_flight >= 1, max_retries >= 0, backoffs >= 0 and timeouts > 0");
  }
  std::string why;
  const CurlApi* api = curl_api(&why);
  if (api == nullptr) {
    return unsupported(
        "remote URLs need libcurl (libcurl.so.4, e.g. apt-get install libcurl4), which cannot be loaded: " + why);
  }
  auto impl = std::make_unique<Impl>(*api, options);
  impl->multi = api->curl_multi_init();
  if (impl->multi == nullptr) return environment_error("libcurl: curl_multi_init failed (out of memory)");
  const int most = options.max_in_flight > 0 ? options.max_in_flight : options.max_auto_in_flight;
  api->curl_multi_setopt(impl->multi, CURLMOPT_MAXCONNECTS, static_cast<long>(most));  // the connection cache
  impl->set_limit(options.max_in_flight > 0 ? options.max_in_flight
                                            : std::min(kMinAutoInFlight, options.max_auto_in_flight));
  Impl* raw = impl.get();
  Result<std::thread> thread = start_thread("chute-http", [raw] { raw->run(); });
  if (!thread.is_ok()) {
    api->curl_multi_cleanup(impl->multi);
    return thread.status();
  }
  impl->thread = std::move(thread.value());
  return std::shared_ptr<HttpEngine>(new HttpEngine(std::move(impl)));
}

HttpEngine::HttpEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpEngine::~HttpEngine() {
  if (impl_->fork_mark.in_child()) {
    // The parent's engine thread is not here: never join it, never take the locks it may have held.
    (void)impl_.release();  // leaked on purpose (fork.h)
    return;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->api.curl_multi_wakeup(impl_->multi);
  impl_->thread.join();
  impl_->api.curl_multi_cleanup(impl_->multi);
}

void HttpEngine::submit(HttpRequest request, Callback done) {
  impl_->enqueue(std::move(request), std::move(done), nullptr);
}

void HttpEngine::submit_cancellable(HttpRequest request, Callback done, std::shared_ptr<std::atomic<bool>> cancel) {
  impl_->enqueue(std::move(request), std::move(done), std::move(cancel));
}

uint64_t HttpEngine::max_memory() const { return impl_->options.max_memory; }

Result<HttpResponse> HttpEngine::fetch(HttpRequest request) {
  std::promise<Result<HttpResponse>> promise;
  std::future<Result<HttpResponse>> future = promise.get_future();
  impl_->enqueue(
      std::move(request), [&promise](Result<HttpResponse> r) { promise.set_value(std::move(r)); }, nullptr);
  return future.get();
}

HttpStats HttpEngine::stats() const {
  const Impl& i = *impl_;
  HttpStats s;
  s.requests = i.requests.load(std::memory_order_relaxed);
  s.bytes = i.bytes.load(std::memory_order_relaxed);
  s.retries = i.retries.load(std::memory_order_relaxed);
  s.failures = i.failures.load(std::memory_order_relaxed);
  s.in_flight = i.in_flight.load(std::memory_order_relaxed);
  s.in_flight_limit = i.in_flight_limit.load(std::memory_order_relaxed);
  std::vector<double> l;
  if (!i.fork_mark.in_child()) {  // the parent's engine thread may have held latency_mu at fork()
    std::lock_guard<std::mutex> lock(i.latency_mu);
    l = i.latencies;
  }
  if (!l.empty()) {
    std::sort(l.begin(), l.end());
    s.latency_p50_s = l[(l.size() - 1) / 2];
    s.latency_p99_s = l[static_cast<size_t>(std::ceil(0.99 * static_cast<double>(l.size()))) - 1];
  }
  return s;
}

}  // namespace chute
