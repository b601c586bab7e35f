// The HTTP engine's pure parts (detail/http_policy.h, redact_url) and what needs no server: libcurl loads,
// a refused connection is retried and then named, the destructor cancels. Servers: python/tests/test_remote_io.py.
#include "chute/remote/http_engine.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <future>
#include <thread>

#include "remote/detail/curl_api.h"
#include "remote/detail/http_policy.h"

namespace chute {
namespace {
using namespace detail;

TEST(RedactUrlTest, RemovesUserinfoAndSignedQueryValues) {
  EXPECT_EQ(redact_url("https://user:s3cret@host:8080/a/b?x=1"), "https://***@host:8080/a/b?x=1");
  EXPECT_EQ(redact_url("http://host/p@q"), "http://host/p@q");  // an @ in the path is not userinfo
  EXPECT_EQ(redact_url("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F1"
                       "&X-Amz-Signature=abcdef&X-Amz-Security-Token=tok&partNumber=2#frag"),
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
            "&X-Amz-Signature=***&X-Amz-Security-Token=***&partNumber=2#frag");
  EXPECT_EQ(redact_url("https://h/k?x-amz-signature=abc"), "https://h/k?x-amz-signature=***");
  EXPECT_EQ(redact_url("http://host"), "http://host");
  EXPECT_EQ(redact_url(""), "");
  EXPECT_EQ(redact_url("http://u:p@host"), "http://***@host");
}

TEST(HttpPolicyTest, ScrubsCredentialsFromMessages) {
  HttpRequest r;
  r.url = "https://bob:hunter2pw@host/k";
  r.sigv4 = SigV4{.access_key = "AKIDEXAMPLE", .secret_key = "wJalrXUtnFEMI", .session_token = "FwoGZXIvYXdz"};
  EXPECT_EQ(scrub_secrets("x hunter2pw y wJalrXUtnFEMIwJalrXUtnFEMI FwoGZXIvYXdz AKIDEXAMPLE bob:hunter2pw", r),
            "x *** y ****** *** *** ***");
  EXPECT_EQ(scrub_secrets("nothing secret", r), "nothing secret");
  HttpRequest plain;
  plain.url = "http://host/p@q";  // no userinfo
  EXPECT_EQ(scrub_secrets("http://host/p@q: HTTP 500", plain), "http://host/p@q: HTTP 500");
  EXPECT_TRUE(has_header({"Content-Type: x"}, "content-type"));
  EXPECT_FALSE(has_header({"Content-Typo: x", "content-type"}, "content-type"));
}

TEST(HttpPolicyTest, BackoffIsFullJitterUnderAnExponentialCap) {
  for (int retry = 0; retry < 20; ++retry) {
    const double cap = std::min(5.0, 0.05 * (1 << std::min(retry, 16)));
    EXPECT_DOUBLE_EQ(backoff_delay_s(retry, 0.05, 5.0, 0.0), 0.0);
    EXPECT_NEAR(backoff_delay_s(retry, 0.05, 5.0, 0.999999), cap, cap * 1e-5) << retry;
    EXPECT_NEAR(backoff_delay_s(retry, 0.05, 5.0, 0.5), cap / 2, 1e-12) << retry;
  }
  EXPECT_DOUBLE_EQ(backoff_delay_s(1000, 0.05, 5.0, 0.5), 2.5);  // no overflow at large retry numbers
  EXPECT_DOUBLE_EQ(backoff_delay_s(3, 0.05, 5.0, 7.0), 0.4);     // u outside [0, 1) is clamped
}

TEST(HttpPolicyTest, RetryAfterTakesSecondsOrAnHttpDate) {
  const int64_t now = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(retry_after_s("120", now), 120.0);
  EXPECT_EQ(retry_after_s(" 0 ", now), 0.0);
  EXPECT_EQ(retry_after_s("Sun, 06 Nov 1994 08:50:07 GMT", now), 30.0);
  EXPECT_EQ(retry_after_s("Sun, 06 Nov 1994 08:49:00 GMT", now), 0.0);         // in the past: at once
  EXPECT_GT(*retry_after_s("99999999999999999999999", now), kMaxRetryAfterS);  // huge: the caller caps it
  for (const char* bad : {"", "-5", "1.5", "soon", "Sun, 06 Nov 1994 08:49:37", "120s"})
    EXPECT_FALSE(retry_after_s(bad, now).has_value()) << bad;
}

ResponseFacts range_facts(long status, uint64_t offset, uint64_t length, uint64_t body) {
  ResponseFacts f;
  f.status = status;
  f.range_offset = offset;
  f.range_length = length;
  f.content_length = body;
  f.body_size = body;
  return f;
}

TEST(HttpPolicyTest, ResponseOutcomes) {
  EXPECT_EQ(check_response(range_facts(206, 0, 100, 100)).verdict, Verdict::kDone);
  EXPECT_EQ(check_response(range_facts(200, 0, 0, 100)).verdict, Verdict::kDone);
  for (long s : {500L, 502L, 503L, 504L, 429L})
    EXPECT_EQ(check_response(range_facts(s, 0, 0, 0)).verdict, Verdict::kRetry);
  AttemptCheck nf = check_response(range_facts(404, 0, 0, 0));
  EXPECT_EQ(nf.verdict, Verdict::kFail);
  EXPECT_EQ(nf.code, StatusCode::kNotFound);
  EXPECT_EQ(check_response(range_facts(403, 0, 0, 0)).code, StatusCode::kIoError);
  EXPECT_EQ(check_response(range_facts(416, 90, 20, 0)).code, StatusCode::kInvalidArgument);
  ResponseFacts slow = range_facts(503, 0, 0, 0);
  slow.body = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Reduce</Message></Error>";
  EXPECT_EQ(check_response(slow).reason, "HTTP 503 SlowDown");
  EXPECT_EQ(check_response(slow).verdict, Verdict::kRetry);
  EXPECT_EQ(check_response(range_facts(200, 0, 0, 0)).reason, "");
}

TEST(HttpPolicyTest, A412IsAnAnswerOnlyToAConditionalRequest) {
  ResponseFacts changed = range_facts(412, 0, 100, 0);
  EXPECT_EQ(check_response(changed).verdict, Verdict::kFail);
  changed.conditional = true;  // If-Match: the object is no longer that version (download() reads it again)
  EXPECT_EQ(check_response(changed).verdict, Verdict::kDone);
}

TEST(HttpPolicyTest, AnAccessDeniedSaysWhatTheRequestsOwnerKnows) {
  ResponseFacts denied = range_facts(403, 0, 0, 0);
  denied.body = "<Error><Code>AccessDenied</Code></Error>";
  EXPECT_EQ(check_response(denied).reason, "HTTP 403 AccessDenied (access denied)");
  denied.denied_hint = "the request was unsigned: no credentials were found (tried: x)";
  EXPECT_EQ(check_response(denied).reason,
            "HTTP 403 AccessDenied (access denied: the request was unsigned: no credentials were found (tried: x))");
}

TEST(HttpPolicyTest, TruncatedBodiesAreRetried) {
  ResponseFacts short_of_length = range_facts(200, 0, 0, 50);
  short_of_length.content_length = 100;  // Content-Length said 100, 50 arrived
  AttemptCheck c = check_response(short_of_length);
  EXPECT_EQ(c.verdict, Verdict::kRetry);
  EXPECT_EQ(c.reason, "truncated body: 50 of 100 bytes");
  ResponseFacts short_of_range = range_facts(206, 1000, 100, 60);  // no Content-Range total
  short_of_range.content_length.reset();
  EXPECT_EQ(check_response(short_of_range).verdict, Verdict::kRetry);
  ResponseFacts mid_object = range_facts(206, 1000, 100, 60);
  mid_object.range_total = 5000;  // the object goes on: a truncation, not the end
  EXPECT_EQ(check_response(mid_object).verdict, Verdict::kRetry);
  ResponseFacts past_end = range_facts(206, 1000, 100, 60);
  past_end.range_total = 1060;  // the range ends past the object: an error of the caller, not retried
  EXPECT_EQ(check_response(past_end).verdict, Verdict::kFail);
  EXPECT_EQ(check_response(past_end).code, StatusCode::kInvalidArgument);
  EXPECT_EQ(check_response(range_facts(206, 0, 100, 101)).verdict, Verdict::kFail);  // too long
  ResponseFacts head = range_facts(200, 0, 0, 0);
  head.head = true;
  head.content_length = 100;  // HEAD: Content-Length describes the object, no body comes
  EXPECT_EQ(check_response(head).verdict, Verdict::kDone);
  ResponseFacts whole = range_facts(200, 10, 20, 100);  // Range ignored: the whole object, sliced later
  EXPECT_EQ(check_response(whole).verdict, Verdict::kDone);
  EXPECT_EQ(check_response(range_facts(200, 90, 20, 100)).code, StatusCode::kInvalidArgument);
}

TEST(HttpPolicyTest, TransportErrorsRetryExceptBadUrls) {
  EXPECT_EQ(check_transport(7, "Failed to connect").verdict, Verdict::kRetry);         // CURLE_COULDNT_CONNECT
  EXPECT_EQ(check_transport(18, "partial file").verdict, Verdict::kRetry);             // CURLE_PARTIAL_FILE
  EXPECT_EQ(check_transport(28, "timed out").verdict, Verdict::kRetry);                // CURLE_OPERATION_TIMEDOUT
  EXPECT_EQ(check_transport(47, "Maximum (8) redirects").code, StatusCode::kIoError);  // a loop: not retried
  EXPECT_EQ(check_transport(56, "reset").verdict, Verdict::kRetry);                    // CURLE_RECV_ERROR
  EXPECT_EQ(check_transport(CURLE_URL_MALFORMAT, "bad").verdict, Verdict::kFail);
  EXPECT_EQ(check_transport(CURLE_UNSUPPORTED_PROTOCOL, "bad").verdict, Verdict::kFail);
}

TEST(HttpPolicyTest, ParsesS3ErrorCodeAndContentRange) {
  EXPECT_EQ(s3_error_code("<Error><Code>NoSuchKey</Code></Error>"), "NoSuchKey");
  EXPECT_EQ(s3_error_code("not xml"), "");
  EXPECT_EQ(s3_error_code("<Code>unterminated"), "");
  EXPECT_EQ(content_range_total("bytes 0-99/1000"), 1000u);
  EXPECT_EQ(content_range_total("bytes 0-99/*"), std::nullopt);
  EXPECT_EQ(content_range_total(""), std::nullopt);
}

DepthWindow window(int limit, double mbps, double latency_s, bool waited, double body = 1 << 20) {
  return DepthWindow{.limit = limit,
                     .throughput_bps = mbps * (1 << 20),
                     .latency_p50_s = latency_s,
                     .mean_body_bytes = body,
                     .queue_waited = waited};
}

TEST(HttpAutotuneTest, GrowsWhileRequestsWaitAndThroughputRises) {
  HttpOptions o;
  // 4 in flight, 1 MiB bodies at 20 ms: 200 MiB/s; requests wait: double.
  EXPECT_EQ(auto_in_flight_limit(window(4, 200, 0.02, true), nullptr, o), 8);
  DepthWindow prev = window(4, 200, 0.02, true);
  EXPECT_EQ(auto_in_flight_limit(window(8, 400, 0.02, true), &prev, o), 16);  // rose with depth: double
  // Little's law asks for more than double: 400 MiB/s x 0.1 s / 1 MiB = 40, + 25% margin.
  EXPECT_EQ(auto_in_flight_limit(window(8, 400, 0.1, true), &prev, o), 50);
}

TEST(HttpAutotuneTest, HoldsWhenDepthNoLongerHelps) {
  HttpOptions o;
  DepthWindow prev = window(16, 400, 0.04, true);
  // Doubling the depth gave 5% more: the link is the limit, hold.
  EXPECT_EQ(auto_in_flight_limit(window(32, 420, 0.08, true), &prev, o), 32);
}

TEST(HttpAutotuneTest, ShrinksToLittlesDepthWhenNothingWaits) {
  HttpOptions o;
  // 50 MiB/s of 1 MiB bodies at 40 ms: 2 in flight suffice, + margin 2 = 4; never below the floor.
  EXPECT_EQ(auto_in_flight_limit(window(32, 50, 0.04, false), nullptr, o), 4);
  // 200 MiB/s at 50 ms: 10 + 3 = 13.
  EXPECT_EQ(auto_in_flight_limit(window(32, 200, 0.05, false), nullptr, o), 13);
  // Never above the current depth when nothing waits.
  EXPECT_EQ(auto_in_flight_limit(window(8, 200, 0.05, false), nullptr, o), 8);
}

TEST(HttpAutotuneTest, StaysWithinItsBounds) {
  HttpOptions o;
  o.max_auto_in_flight = 20;
  EXPECT_EQ(auto_in_flight_limit(window(16, 4000, 0.1, true), nullptr, o), 20);  // max_auto_in_flight
  o.max_auto_in_flight = 64;
  o.max_memory = 64ull << 20;  // 64 MiB of 8 MiB bodies: 8 in flight at most
  EXPECT_EQ(auto_in_flight_limit(window(8, 4000, 0.1, true, 8 << 20), nullptr, o), 8);
  o.max_memory = 1;  // a budget smaller than one body still keeps the floor
  EXPECT_EQ(auto_in_flight_limit(window(8, 4000, 0.1, true), nullptr, o), kMinAutoInFlight);
  o.max_memory = 256ull << 20;
  EXPECT_EQ(auto_in_flight_limit(window(1, 0.001, 0.001, false), nullptr, o), kMinAutoInFlight);  // floor
  HttpOptions two;
  two.max_auto_in_flight = 2;  // below the floor: the user's maximum wins
  EXPECT_EQ(auto_in_flight_limit(window(2, 4000, 0.1, true), nullptr, two), 2);
  EXPECT_EQ(auto_in_flight_limit(window(2, 0.001, 0.001, false), nullptr, two), 2);
  EXPECT_EQ(auto_in_flight_limit(window(12, 0, 0, true), nullptr, o), 12);  // nothing measured: keep
  for (int limit : {1, 4, 9, 64, 1000}) {
    for (bool waited : {false, true}) {
      for (double mbps : {0.0, 1.0, 100.0, 1e6}) {
        const int n = auto_in_flight_limit(window(limit, mbps, 0.05, waited), nullptr, o);
        EXPECT_GE(n, kMinAutoInFlight);
        EXPECT_LE(n, o.max_auto_in_flight);
      }
    }
  }
}

// Needs libcurl.so.4 at run time only; skipped where it is absent.
std::shared_ptr<HttpEngine> engine_or_skip(HttpOptions o) {
  Result<std::shared_ptr<HttpEngine>> e = HttpEngine::create(o);
  if (!e.is_ok()) {
    EXPECT_EQ(e.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(e.status().message().find("libcurl.so.4"), std::string::npos) << e.status().message();
    return nullptr;
  }
  return *e;
}

TEST(HttpEngineTest, RefusedConnectionIsRetriedThenNamed) {
  HttpOptions o;
  o.max_retries = 2;
  o.backoff_base_s = 0.001;
  o.backoff_max_s = 0.002;
  auto engine = engine_or_skip(o);
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  HttpRequest r;
  r.url = "http://user:pa55word@127.0.0.1:1/x";  // port 1: nothing listens
  Result<HttpResponse> result = engine->fetch(r);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kEnvironment);
  const std::string& m = result.status().message();
  EXPECT_NE(m.find("GET http://***@127.0.0.1:1/x: "), std::string::npos) << m;
  EXPECT_NE(m.find("after 3 attempts over"), std::string::npos) << m;
  EXPECT_EQ(m.find("pa55word"), std::string::npos) << m;
  const HttpStats s = engine->stats();
  EXPECT_EQ(s.requests, 1u);
  EXPECT_EQ(s.retries, 2u);
  EXPECT_EQ(s.failures, 1u);
}

TEST(HttpEngineTest, RejectsOtherSchemesAndBadOptions) {
  auto engine = engine_or_skip({});
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  HttpRequest r;
  r.url = "file:///etc/passwd";
  Result<HttpResponse> result = engine->fetch(r);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  r.url = "http://127.0.0.1:1/x";
  r.offset = 10;  // an offset without a length would silently read from 0
  result = engine->fetch(r);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("offset 10 without a length"), std::string::npos);
  HttpOptions bad;
  bad.max_in_flight = -1;
  EXPECT_EQ(HttpEngine::create(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpEngineTest, DestructorCancelsWhatIsOutstanding) {
  HttpOptions o;
  o.max_in_flight = 1;
  o.backoff_base_s = 60;  // every retry waits long: the requests are outstanding when the engine goes
  o.backoff_max_s = 60;
  auto engine = engine_or_skip(o);
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  std::vector<std::future<Result<HttpResponse>>> results;
  std::vector<std::shared_ptr<std::promise<Result<HttpResponse>>>> promises;
  for (int i = 0; i < 5; ++i) {
    auto p = std::make_shared<std::promise<Result<HttpResponse>>>();
    results.push_back(p->get_future());
    HttpRequest r;
    r.url = "http://127.0.0.1:1/" + std::to_string(i);
    engine->submit(r, [p](Result<HttpResponse> res) { p->set_value(std::move(res)); });
  }
  engine.reset();  // joins the engine thread; every callback has run
  for (auto& f : results) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    Result<HttpResponse> r = f.get();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().message();
  }
}

// A loopback listener that never answers: connections complete (the kernel's backlog), requests hang.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentServer() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(HttpEngineTest, DestructorCancelsRequestsInFlight) {
  SilentServer server;
  HttpOptions o;
  o.max_in_flight = 3;
  auto engine = engine_or_skip(o);
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  std::vector<std::future<Result<HttpResponse>>> results;
  for (int i = 0; i < 5; ++i) {  // 3 in flight, 2 queued
    auto p = std::make_shared<std::promise<Result<HttpResponse>>>();
    results.push_back(p->get_future());
    HttpRequest r;
    r.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/" + std::to_string(i);
    engine->submit(r, [p](Result<HttpResponse> res) { p->set_value(std::move(res)); });
  }
  // Wait (bounded) until three requests are on the wire; nothing answers them.
  for (int i = 0; i < 1000 && engine->stats().in_flight < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(engine->stats().in_flight, 3);
  engine.reset();
  for (auto& f : results) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    Result<HttpResponse> r = f.get();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().message();
  }
}

// A request whose token is cancelled ends kCancelled within about a sweep, wherever it is: on the wire to a
// server that never answers, or waiting out a long backoff; the others go on.
TEST(HttpEngineTest, ACancelledRequestEndsPromptlyInFlightOrBackingOff) {
  SilentServer server;
  HttpOptions o;
  o.backoff_base_s = 60;  // a retry would wait a minute
  o.backoff_max_s = 60;
  auto engine = engine_or_skip(o);
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  auto token = CancelToken::make();
  const auto submit = [&](const std::string& url, std::shared_ptr<const CancelToken> cancel) {
    auto p = std::make_shared<std::promise<Result<HttpResponse>>>();
    HttpRequest r;
    r.url = url;
    engine->submit(
        r, [p](Result<HttpResponse> res) { p->set_value(std::move(res)); }, std::move(cancel));
    return p->get_future();
  };
  const std::string silent = "http://127.0.0.1:" + std::to_string(server.port());
  auto on_the_wire = submit(silent + "/a", token);
  auto backing_off = submit("http://127.0.0.1:1/refused", token);  // refused, then a minute's backoff
  auto other = submit(silent + "/b", nullptr);
  for (int i = 0; i < 1000 && (engine->stats().in_flight < 2 || engine->stats().retries < 1); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(engine->stats().retries, 1u);
  const auto t0 = std::chrono::steady_clock::now();
  token->cancel();
  for (auto* f : {&on_the_wire, &backing_off}) {
    ASSERT_EQ(f->wait_for(std::chrono::seconds(30)), std::future_status::ready);  // not a minute, not forever
    Result<HttpResponse> r = f->get();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().message();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(other.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);  // not cancelled
  // fetch() watches the calling thread's scope.
  auto scoped = std::async(std::launch::async, [&] {
    CancelScope scope(token);
    HttpRequest r;
    r.url = silent + "/c";
    return engine->fetch(r);
  });
  ASSERT_EQ(scoped.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(scoped.get().status().code(), StatusCode::kCancelled);
}

TEST(HttpEngineTest, ARequestMayHaveItsOwnTimeoutAndRetryBudget) {
  SilentServer server;  // accepts, never answers: only the request's own time limit ends it
  auto engine = engine_or_skip({});
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  HttpRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/metadata";
  r.timeout_s = 0.2;
  r.max_retries = 0;
  Result<HttpResponse> result = engine->fetch(r);  // the engine's stall timeout (30 s) and 8 retries unused
  ASSERT_FALSE(result.is_ok());
  EXPECT_NE(result.status().message().find("after 1 attempts"), std::string::npos) << result.status().message();
  EXPECT_EQ(engine->stats().retries, 0u);
}

TEST(HttpEngineTest, AStalledResponseIsRetriedThenNamed) {
  SilentServer server;  // accepts, never answers: no byte for stall_timeout_s ends each attempt
  HttpOptions o;
  o.stall_timeout_s = 1;
  o.max_retries = 1;
  o.backoff_base_s = 0.001;
  auto engine = engine_or_skip(o);
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  HttpRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/slow";
  Result<HttpResponse> result = engine->fetch(r);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kEnvironment);
  EXPECT_NE(result.status().message().find("/slow: "), std::string::npos) << result.status().message();
  EXPECT_NE(result.status().message().find("after 2 attempts"), std::string::npos) << result.status().message();
  EXPECT_EQ(engine->stats().retries, 1u);
}

TEST(HttpEngineTest, AForkedChildFailsClearlyAndExitsCleanly) {
  auto engine = engine_or_skip({});
  if (!engine) GTEST_SKIP() << "libcurl.so.4 is not loadable";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    HttpRequest r;
    r.url = "http://127.0.0.1:1/x";
    Result<HttpResponse> result = engine->fetch(r);  // must not hang: no engine thread in this process
    const bool ok = !result.is_ok() && result.status().code() == StatusCode::kCancelled &&
                    result.status().message().find("fork") != std::string::npos;
    engine.reset();  // must not join the parent's thread
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 3000 && done == 0; ++i) {  // 30 s at most
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the forked child hung";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace chute
