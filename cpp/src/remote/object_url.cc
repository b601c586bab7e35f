#include "chute/remote/object_url.h"

#include <cctype>

namespace chute {

const char* url_scheme_name(UrlScheme scheme) {
  switch (scheme) {
    case UrlScheme::kFile:
      return "file";
    case UrlScheme::kHttp:
      return "http";
    case UrlScheme::kHttps:
      return "https";
    case UrlScheme::kS3:
      return "s3";
    case UrlScheme::kGs:
      return "gs";
  }
  return "?";
}

namespace {

Status bad_url(std::string_view url, const std::string& why) {
  return invalid_argument("bad URL '" + std::string(url) + "': " + why);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> percent_decode(std::string_view url, std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return bad_url(url, "a '%' not followed by two hex digits");
    const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return bad_url(url, "a '%' not followed by two hex digits");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

bool valid_bucket_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

}  // namespace

Result<ObjectUrl> parse_object_url(std::string_view url) {
  ObjectUrl out;
  out.text = std::string(url);
  if (url.empty()) return invalid_argument("bad URL '': empty");
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    out.scheme = UrlScheme::kFile;
    out.path = std::string(url);
    return out;
  }
  std::string scheme(url.substr(0, sep));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string_view rest = url.substr(sep + 3);
  if (scheme == "s3" || scheme == "gs") {
    out.scheme = scheme == "s3" ? UrlScheme::kS3 : UrlScheme::kGs;
    const size_t slash = rest.find('/');
    out.bucket = std::string(rest.substr(0, slash));
    if (out.bucket.empty()) return bad_url(url, "no bucket (expected " + scheme + "://bucket/key)");
    for (char c : out.bucket) {
      if (!valid_bucket_char(c)) {
        return bad_url(url,
                       "bucket '" + out.bucket + "' has a character buckets cannot have: '" + std::string(1, c) + "'");
      }
    }
    if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
    return out;
  }
  if (scheme == "http" || scheme == "https") {
    out.scheme = scheme == "http" ? UrlScheme::kHttp : UrlScheme::kHttps;
    const size_t end = rest.find_first_of("/?#");
    if (rest.substr(0, end).empty()) return bad_url(url, "no host");
    out.path = std::string(url);
    return out;
  }
  if (scheme == "file") {
    out.scheme = UrlScheme::kFile;
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return bad_url(url, "expected file:///absolute/path");
    const std::string_view host = rest.substr(0, slash);
    if (!host.empty() && host != "localhost") {
      return bad_url(url, "file:// URLs on another host ('" + std::string(host) + "') are not supported");
    }
    CHUTE_ASSIGN_OR_RETURN(out.path, percent_decode(url, rest.substr(slash)));
    return out;
  }
  return bad_url(url, "unknown scheme '" + scheme + "' (expected s3, gs, http, https or file)");
}

bool is_remote(std::string_view url) {
  auto parsed = parse_object_url(url);
  return parsed.is_ok() && parsed->remote();
}

std::string join_url(std::string_view url, std::string_view name) {
  std::string_view base = url, tail;
  if (url.starts_with("http://") || url.starts_with("https://")) {
    const size_t q = url.find_first_of("?#", url.find("://") + 3);
    if (q != std::string_view::npos) {
      base = url.substr(0, q);
      tail = url.substr(q);
    }
  }
  std::string out(base);
  if (out.empty() || out.back() != '/') out += '/';
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  out += name;
  out += tail;
  return out;
}

std::string single_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

}  // namespace chute
