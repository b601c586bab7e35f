#include "chute/remote/http_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "chute/base/fork.h"
#include "chute/base/fork_gate.h"
#include "chute/base/thread.h"
#include "remote/detail/curl_api.h"
#include "remote/detail/http_policy.h"
#include "remote/detail/http_transfer.h"

namespace chute {

std::optional<std::string> HttpResponse::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

namespace {
using namespace detail;

constexpr size_t kLatencySamples = 1024;  // the recent successful attempts behind latency p50/p99
constexpr double kWindowS = 0.25;         // the autotuner's measurement window
constexpr int kWindowMinCompletions = 4;
// How often the engine looks for cancelled requests while any are outstanding (and at once when woken for
// it): the bound on how long a cancelled request can still hold its connection.
constexpr auto kCancelSweep = std::chrono::milliseconds(100);

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
  std::atomic<bool> sweep_now{false};              // a request was cancelled: look at once

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

  void enqueue(HttpRequest request, HttpEngine::Callback done, std::shared_ptr<const CancelToken> cancel) {
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

  void start(std::unique_ptr<Transfer> t) {
    if (t->cancelled()) return fail(std::move(t), StatusCode::kCancelled, "cancelled");
    if (Status begun = t->begin_attempt(api, options); !begun.is_ok()) {
      return fail(std::move(t), begun.code(), begun.message());
    }
    CURL* e = t->easy;
    if (CURLMcode m = api.curl_multi_add_handle(multi, e); m != CURLM_OK) {
      std::string why = api.curl_multi_strerror(m);
      t->end_attempt(api);
      return fail(std::move(t), StatusCode::kEnvironment, "libcurl cannot start the request: " + why);
    }
    active.emplace(e, std::move(t));
    in_flight.store(static_cast<int>(active.size()), std::memory_order_relaxed);
  }

  // A completed attempt (libcurl's CURLMSG_DONE): done, retried after a backoff, or failed.
  void complete(CURL* e, CURLcode code) {
    auto it = active.find(e);
    if (it == active.end()) return;
    std::unique_ptr<Transfer> t = std::move(it->second);
    active.erase(it);
    in_flight.store(static_cast<int>(active.size()), std::memory_order_relaxed);
    api.curl_multi_remove_handle(multi, e);
    const Clock::time_point now = Clock::now();
    const AttemptCheck check = t->check_attempt(api, code);
    if (check.verdict == Verdict::kDone) {
      HttpResponse response = t->take_response();
      record_success(seconds(now - t->attempt_start), t->sinks() ? t->request.length : response.body.size());
      return finish(std::move(t), std::move(response));
    }
    if (check.verdict == Verdict::kFail) return fail(std::move(t), check.code, check.reason);
    if (t->cancelled()) return fail(std::move(t), StatusCode::kCancelled, "cancelled after: " + check.reason);
    if (t->attempts > (t->request.max_retries >= 0 ? t->request.max_retries : options.max_retries)) {
      char over[32];
      std::snprintf(over, sizeof(over), "%.2f", seconds(now - t->first_start));
      return fail(std::move(t), StatusCode::kEnvironment,
                  check.reason + " after " + std::to_string(t->attempts) + " attempts over " + over + " s");
    }
    retries.fetch_add(1, std::memory_order_relaxed);
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    double delay = backoff_delay_s(t->attempts - 1, options.backoff_base_s, options.backoff_max_s, u);
    const long status = t->response.status;
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

  // Ends every cancelled request, wherever it is: queued, backing off, or in flight (its handle removed
  // from the multi handle, which drops its connection).
  void sweep_cancelled() {
    std::vector<std::unique_ptr<Transfer>> cancelled;
    for (auto it = queue.begin(); it != queue.end();) {
      if ((*it)->cancelled()) {
        cancelled.push_back(std::move(*it));
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = backing_off.begin(); it != backing_off.end();) {
      if (it->second->cancelled()) {
        cancelled.push_back(std::move(it->second));
        it = backing_off.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = active.begin(); it != active.end();) {
      if (it->second->cancelled()) {
        api.curl_multi_remove_handle(multi, it->first);
        it->second->end_attempt(api);
        cancelled.push_back(std::move(it->second));
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    in_flight.store(static_cast<int>(active.size()), std::memory_order_relaxed);
    for (auto& t : cancelled) fail(std::move(t), StatusCode::kCancelled, "cancelled");
  }

  void run() {
    window_start = last_tick = Clock::now();
    Clock::time_point last_sweep = window_start;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) break;
        for (auto& t : incoming) queue.push_back(std::move(t));
        incoming.clear();
      }
      // A turn of libcurl (and its TLS library) is work a fork waits for; the poll below is not.
      std::optional<ForkGate::Work> work(std::in_place);
      Clock::time_point now = Clock::now();
      if (sweep_now.exchange(false, std::memory_order_acq_rel) || now - last_sweep >= kCancelSweep) {
        sweep_cancelled();
        last_sweep = now;
      }
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
      // While requests are outstanding, wake at least every kCancelSweep to look for cancelled ones.
      int timeout_ms =
          active.empty() && backing_off.empty() && queue.empty() ? 1000 : static_cast<int>(kCancelSweep.count());
      if (!backing_off.empty()) {
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(backing_off.begin()->first - now).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(wait + 1, 0, timeout_ms));
      }
      work.reset();
      api.curl_multi_poll(multi, nullptr, 0, timeout_ms, nullptr);
    }
    // Stopping: every outstanding request ends kCancelled.
    for (auto& [e, t] : active) {
      api.curl_multi_remove_handle(multi, e);
      t->end_attempt(api);
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

void HttpEngine::submit(HttpRequest request, Callback done, std::shared_ptr<const CancelToken> cancel) {
  impl_->enqueue(std::move(request), std::move(done), std::move(cancel));
}

void HttpEngine::wake_for_cancel() {
  if (impl_->fork_mark.in_child()) return;
  impl_->sweep_now.store(true, std::memory_order_release);
  impl_->api.curl_multi_wakeup(impl_->multi);
}

const HttpOptions& HttpEngine::options() const { return impl_->options; }

Result<HttpResponse> HttpEngine::fetch(HttpRequest request) {
  std::promise<Result<HttpResponse>> promise;
  std::future<Result<HttpResponse>> future = promise.get_future();
  impl_->enqueue(
      std::move(request), [&promise](Result<HttpResponse> r) { promise.set_value(std::move(r)); },
      CancelScope::current());
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
