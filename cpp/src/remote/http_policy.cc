#include "remote/detail/http_policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "chute/remote/http_engine.h"
#include "remote/detail/curl_api.h"

namespace chute {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Query parameters whose values are credentials (presigned URLs).
bool secret_param(std::string_view name) {
  return iequals(name, "X-Amz-Signature") || iequals(name, "X-Amz-Credential") ||
         iequals(name, "X-Amz-Security-Token") || iequals(name, "Signature") || iequals(name, "AWSAccessKeyId") ||
         iequals(name, "x-goog-signature") || iequals(name, "x-goog-credential");
}

}  // namespace

std::string redact_url(std::string_view url) {
  std::string out;
  out.reserve(url.size());
  // userinfo: between "//" and the first '@' of the authority.
  size_t authority = url.find("//");
  size_t start = authority == std::string_view::npos ? 0 : authority + 2;
  size_t authority_end = url.find_first_of("/?#", start);
  if (authority_end == std::string_view::npos) authority_end = url.size();
  size_t at = url.rfind('@', authority_end == 0 ? 0 : authority_end - 1);
  if (authority != std::string_view::npos && at != std::string_view::npos && at >= start && at < authority_end) {
    out.append(url.substr(0, start));
    out.append("***@");
    url.remove_prefix(at + 1);
    authority_end -= at + 1;
  } else {
    out.append(url.substr(0, authority_end));
    url.remove_prefix(authority_end);
    authority_end = 0;
  }
  size_t q = url.find('?');
  if (q == std::string_view::npos) {
    out.append(url);
    return out;
  }
  out.append(url.substr(0, q + 1));
  std::string_view query = url.substr(q + 1);
  std::string_view fragment;
  if (size_t hash = query.find('#'); hash != std::string_view::npos) {
    fragment = query.substr(hash);
    query = query.substr(0, hash);
  }
  bool first = true;
  while (true) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    if (!first) out.push_back('&');
    first = false;
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && secret_param(pair.substr(0, eq))) {
      out.append(pair.substr(0, eq + 1));
      out.append("***");
    } else {
      out.append(pair);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  out.append(fragment);
  return out;
}

namespace detail {

std::string s3_error_code(std::string_view body) {
  size_t open = body.find("<Code>");
  if (open == std::string_view::npos) return {};
  size_t close = body.find("</Code>", open);
  if (close == std::string_view::npos) return {};
  std::string_view code = body.substr(open + 6, close - open - 6);
  if (code.size() > 64) return {};
  return std::string(code);
}

std::optional<uint64_t> content_range_total(std::string_view content_range) {
  size_t slash = content_range.rfind('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string_view total = content_range.substr(slash + 1);
  while (!total.empty() && (total.back() == ' ' || total.back() == '\r' || total.back() == '\n'))
    total.remove_suffix(1);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(total.data(), total.data() + total.size(), value);
  if (ec != std::errc() || end != total.data() + total.size() || total.empty()) return std::nullopt;
  return value;
}

AttemptCheck check_response(const ResponseFacts& f) {
  auto http = [&] {
    std::string reason = "HTTP " + std::to_string(f.status);
    if (std::string code = s3_error_code(f.body); !code.empty()) reason += " " + code;
    return reason;
  };
  if (f.status == 404) return {Verdict::kFail, StatusCode::kNotFound, http()};
  if (f.status == 416) {
    return {Verdict::kFail, StatusCode::kInvalidArgument,
            http() + ": the range [" + std::to_string(f.range_offset) + ", " +
                std::to_string(f.range_offset + f.range_length) + ") is past the end of the object"};
  }
  if (f.status == 401 || f.status == 403) {
    // A HEAD's answer has no body to name S3's reason (SignatureDoesNotMatch, AccessDenied): say it, and
    // what the request's owner knows of its credentials.
    return {Verdict::kFail, StatusCode::kIoError,
            http() + " (access denied" + (f.denied_hint.empty() ? "" : ": " + std::string(f.denied_hint)) + ")"};
  }
  if (f.status == 412 && f.conditional) return {};
  if (f.status == 429 || f.status >= 500) return {Verdict::kRetry, StatusCode::kOk, http()};
  if (f.status < 200 || f.status >= 300) return {Verdict::kFail, StatusCode::kIoError, http()};
  if (f.head) return {};
  auto truncated = [&](uint64_t expected) {
    return AttemptCheck{
        Verdict::kRetry, StatusCode::kOk,
        "truncated body: " + std::to_string(f.body_size) + " of " + std::to_string(expected) + " bytes"};
  };
  if (f.content_length && f.body_size < *f.content_length) return truncated(*f.content_length);
  if (f.range_length > 0) {
    if (f.status == 206) {
      if (f.body_size > f.range_length) {
        return {
            Verdict::kFail, StatusCode::kIoError,
            "HTTP 206 with " + std::to_string(f.body_size) + " bytes for a range of " + std::to_string(f.range_length)};
      }
      if (f.body_size < f.range_length) {
        // All the object had from the offset: the range ends past its end (not a truncation to retry).
        if (f.range_total && f.range_offset + f.body_size == *f.range_total &&
            (!f.content_length || *f.content_length == f.body_size)) {
          return {Verdict::kFail, StatusCode::kInvalidArgument,
                  "the range [" + std::to_string(f.range_offset) + ", " +
                      std::to_string(f.range_offset + f.range_length) + ") is past the end of the object (" +
                      std::to_string(*f.range_total) + " bytes)"};
        }
        return truncated(f.range_length);
      }
    } else if (f.body_size < f.range_offset + f.range_length) {  // 200: the whole object (Range ignored)
      return {Verdict::kFail, StatusCode::kInvalidArgument,
              "the range [" + std::to_string(f.range_offset) + ", " + std::to_string(f.range_offset + f.range_length) +
                  ") is past the end of the object (" + std::to_string(f.body_size) + " bytes)"};
    }
  }
  return {};
}

std::string scrub_secrets(std::string message, const HttpRequest& r) {
  std::vector<std::string> secrets;
  if (r.sigv4) secrets = {r.sigv4->secret_key, r.sigv4->session_token, r.sigv4->access_key};
  size_t scheme = r.url.find("://");
  size_t at = r.url.find('@');
  size_t slash = r.url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (scheme != std::string::npos && at != std::string::npos && at < slash) {
    std::string userinfo = r.url.substr(scheme + 3, at - scheme - 3);
    size_t colon = userinfo.find(':');
    secrets.push_back(userinfo);
    if (colon != std::string::npos) secrets.push_back(userinfo.substr(colon + 1));
  }
  for (const std::string& s : secrets) {
    if (s.size() < 4) continue;  // too short to tell from ordinary text
    for (size_t p = message.find(s); p != std::string::npos; p = message.find(s, p + 3))
      message.replace(p, s.size(), "***");
  }
  return message;
}

bool has_header(const std::vector<std::string>& headers, std::string_view lower_name) {
  for (const std::string& h : headers) {
    if (h.size() > lower_name.size() && h[lower_name.size()] == ':' &&
        std::equal(lower_name.begin(), lower_name.end(), h.begin(),
                   [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
      return true;
    }
  }
  return false;
}

AttemptCheck check_transport(int curl_code, std::string_view message) {
  if (curl_code == CURLE_UNSUPPORTED_PROTOCOL || curl_code == CURLE_URL_MALFORMAT) {
    return {Verdict::kFail, StatusCode::kInvalidArgument, std::string(message)};
  }
  if (curl_code == CURLE_TOO_MANY_REDIRECTS)  // a redirect loop: the server's answer, every time
    return {Verdict::kFail, StatusCode::kIoError, std::string(message)};
  return {Verdict::kRetry, StatusCode::kOk, std::string(message)};
}

std::optional<double> retry_after_s(std::string_view value, int64_t now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    uint64_t seconds = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (ec == std::errc::result_out_of_range) return kMaxRetryAfterS * 2;  // huge: capped by the caller
    if (ec != std::errc() || end != value.data() + value.size()) return std::nullopt;
    return static_cast<double>(seconds);
  }
  // IMF-fixdate, the form senders must use ("Sun, 06 Nov 1994 08:49:37 GMT").
  std::tm tm{};
  const std::string text(value);
  const char* end = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const int64_t at = static_cast<int64_t>(::timegm(&tm));
  return static_cast<double>(std::max<int64_t>(at - now, 0));
}

double backoff_delay_s(int retry, double base_s, double max_s, double u01) {
  double cap = base_s * std::ldexp(1.0, std::min(retry, 60));
  cap = std::min(cap, max_s);
  return std::clamp(u01, 0.0, 1.0) * std::max(cap, 0.0);
}

int auto_in_flight_limit(const DepthWindow& now, const DepthWindow* previous, const HttpOptions& options) {
  const double body = std::max(now.mean_body_bytes, 1.0);
  int cap = options.max_auto_in_flight;
  const double by_memory = static_cast<double>(options.max_memory) / body;
  if (by_memory < cap) cap = static_cast<int>(by_memory);
  const int floor = std::min(kMinAutoInFlight, std::max(options.max_auto_in_flight, 1));  // the user's max wins
  cap = std::max(cap, floor);
  const double rate = now.throughput_bps / body;  // requests/s
  const double little = std::ceil(std::max(rate * now.latency_p50_s, 0.0));
  const int needed = static_cast<int>(std::min(little + std::max(2.0, std::ceil(little / 4)), 1e6));
  int target;
  if (now.throughput_bps <= 0 || now.latency_p50_s <= 0) {
    target = now.limit;  // nothing measured: keep the depth
  } else if (now.queue_waited) {
    const bool rising =
        previous == nullptr || previous->limit >= now.limit || now.throughput_bps > previous->throughput_bps * 1.1;
    target = rising ? std::max(needed, 2 * now.limit) : now.limit;
  } else {
    target = std::min(needed, std::max(now.limit, kMinAutoInFlight));
  }
  return std::clamp(target, floor, cap);
}

}  // namespace detail
}  // namespace chute
