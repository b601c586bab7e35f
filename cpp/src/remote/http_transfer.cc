#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "remote/detail/http_transfer.h"

namespace chute::detail {
namespace {

constexpr uint64_t kMaxReserve = 64ull << 20;  // a Content-Length reserved up front at most (a claim, not bytes)
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

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (!t->sinks()) {
    t->response.body.insert(t->response.body.end(), data, data + bytes);
    return bytes;
  }
  // 206: the body is the range. 200: the whole object (the server ignored Range): keep the range's part.
  const uint64_t begin = t->status_line == 200 ? t->request.offset : 0;
  const uint64_t end = begin + t->request.length;
  const uint64_t from = std::max(t->received, begin), to = std::min(t->received + bytes, end);
  if (from < to && t->request.sink_buffer != nullptr) {  // in place, as it arrives: the caller's memory
    std::memcpy(t->request.sink_buffer + (from - begin), data + (from - t->received), to - from);
  } else if (from < to) {
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

bool Transfer::sinks() const {
  return (request.sink_fd >= 0 || request.sink_buffer != nullptr) && request.length > 0 && status_line >= 200 &&
         status_line < 300;
}

Status Transfer::begin_attempt(const CurlApi& api, const HttpOptions& options) {
  const HttpRequest& r = request;
  if (!r.url.starts_with("http://") && !r.url.starts_with("https://")) {
    return invalid_argument("not an http:// or https:// URL");
  }
  if (r.length == 0 && r.offset != 0) {
    return invalid_argument("offset " + std::to_string(r.offset) + " without a length (length > 0 selects a range)");
  }
  CURL* e = api.curl_easy_init();
  if (e == nullptr) return environment_error("libcurl cannot create a handle (out of memory)");
  easy = e;
  response = HttpResponse{};
  error[0] = '\0';
  status_line = 0;
  received = 0;
  sink_error.clear();
  staged.clear();  // a failed attempt's unwritten bytes: the retry writes its range again
  if (attempts++ == 0) first_start = Clock::now();
  attempt_start = Clock::now();
  api.curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  api.curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  api.curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  api.curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L << 10);
  api.curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  api.curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
  api.curl_easy_setopt(e, CURLOPT_WRITEDATA, this);
  api.curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
  api.curl_easy_setopt(e, CURLOPT_HEADERDATA, this);
  const double connect_s =
      r.timeout_s > 0 ? std::min(r.timeout_s, options.connect_timeout_s) : options.connect_timeout_s;
  api.curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_s * 1000));
  if (r.timeout_s > 0) api.curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout_s * 1000));
  api.curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  api.curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, std::max(1L, std::lround(std::ceil(options.stall_timeout_s))));
  std::vector<std::string> lines = r.headers;
  if (r.method == "HEAD") {
    api.curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (r.method != "GET") {
    api.curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (r.method == "PUT" || r.method == "POST" || !r.body.empty()) {
    static const char kEmpty[1] = {0};
    api.curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    api.curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.empty() ? kEmpty : reinterpret_cast<const char*>(r.body.data()));
    if (!has_header(lines, "content-type")) lines.push_back("Content-Type: application/octet-stream");
  }
  if (r.length > 0) {
    range = std::to_string(r.offset) + "-" + std::to_string(r.offset + r.length - 1);
    api.curl_easy_setopt(e, CURLOPT_RANGE, range.c_str());
    if (r.sink_fd < 0 && r.sink_buffer == nullptr) response.body.reserve(r.length);
  }
  if (!r.sigv4) {
    // Plain HTTP(S) follows redirects (the Hugging Face Hub answers a file's URL with a 302 to its
    // CDN; a Range header goes along), to http(s) only. A signed request does not: its signature names
    // the host, and S3's 301 (a bucket in another region) is an error that says so.
    api.curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    api.curl_easy_setopt(e, CURLOPT_MAXREDIRS, static_cast<long>(kMaxRedirects));
    api.curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, kCurlProtoHttp | kCurlProtoHttps);
  } else {
    provider = "aws:amz:" + r.sigv4->region + ":" + r.sigv4->service;
    api.curl_easy_setopt(e, CURLOPT_AWS_SIGV4, provider.c_str());
    api.curl_easy_setopt(e, CURLOPT_USERNAME, r.sigv4->access_key.c_str());
    api.curl_easy_setopt(e, CURLOPT_PASSWORD, r.sigv4->secret_key.c_str());
    if (!r.sigv4->session_token.empty()) lines.push_back("x-amz-security-token: " + r.sigv4->session_token);
    // S3 wants the payload's hash as a header; libcurl signs with that header's value when one is given
    // (and hashes the body, without sending the header, when none is).
    if (r.sigv4->service == "s3" && !has_header(lines, "x-amz-content-sha256")) {
      lines.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
  }
  for (const std::string& h : lines) {
    curl_slist* next = api.curl_slist_append(headers, h.c_str());
    if (next == nullptr) {
      end_attempt(api);
      return environment_error("libcurl: out of memory");
    }
    headers = next;
  }
  if (headers != nullptr) api.curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  return Status::ok();
}

void Transfer::end_attempt(const CurlApi& api) {
  if (easy != nullptr) api.curl_easy_cleanup(easy);
  if (headers != nullptr) api.curl_slist_free_all(headers);
  easy = nullptr;
  headers = nullptr;
}

AttemptCheck Transfer::check_attempt(const CurlApi& api, CURLcode code) {
  long status = 0;
  api.curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  response.status = status;
  end_attempt(api);
  const auto sink_failed = [this] { return AttemptCheck{Verdict::kFail, StatusCode::kIoError, sink_error}; };
  if (code == CURLE_OK && sinks() && request.sink_buffer == nullptr && !flush_sink(*this))
    return sink_failed();  // the body's last bytes
  if (code != CURLE_OK) {
    if (!sink_error.empty()) return sink_failed();
    return check_transport(code, error[0] != '\0' ? std::string(error) : api.curl_easy_strerror(code));
  }
  const HttpRequest& r = request;
  ResponseFacts f;
  f.status = status;
  f.head = r.method == "HEAD";
  f.range_offset = r.offset;
  f.range_length = r.length;
  f.conditional = has_header(r.headers, "if-match");
  f.denied_hint = r.denied_hint;
  if (auto cl = response.header("content-length"); cl && !response.header("content-encoding")) {
    f.content_length = std::strtoull(cl->c_str(), nullptr, 10);
  }
  if (auto cr = response.header("content-range")) f.range_total = content_range_total(*cr);
  f.body_size = sinks() ? received : response.body.size();
  f.body = std::string_view(reinterpret_cast<const char*>(response.body.data()), response.body.size());
  return check_response(f);
}

HttpResponse Transfer::take_response() {
  HttpResponse out = std::move(response);
  if (request.length > 0 && out.status == 200 && !sinks()) {  // the whole object came: keep the range
    auto begin = out.body.begin() + static_cast<ptrdiff_t>(request.offset);
    out.body = std::vector<uint8_t>(begin, begin + static_cast<ptrdiff_t>(request.length));
  }
  return out;
}

}  // namespace chute::detail
