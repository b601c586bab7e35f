// Object URLs: where a shard lives (s3://, gs://, http(s)://, file://, a plain path).
//
//   s3://bucket/key          S3 or an S3-compatible store (credentials.h says which endpoint)
//   gs://bucket/key          Google Cloud Storage through its S3 interoperability API
//   http://host/path, https://host/path
//   file:///abs/path         percent-decoded; only an empty host or "localhost"
//   path                     a local path, as given
//
// Patterns that name many objects at once: url_pattern.h.
//
// Thread-safety: plain functions on values.
#pragma once

#include <string>
#include <string_view>

#include "chute/base/status.h"

namespace chute {

enum class UrlScheme { kFile, kHttp, kHttps, kS3, kGs };
const char* url_scheme_name(UrlScheme scheme);  // "file", "http", "https", "s3", "gs"

struct ObjectUrl {
  UrlScheme scheme = UrlScheme::kFile;
  std::string bucket;  // s3, gs
  std::string key;     // s3, gs: the object key (may be empty: the bucket itself), taken literally
  std::string path;    // file: the local path (decoded); http(s): the whole URL
  std::string text;    // the URL as given
  bool remote() const { return scheme != UrlScheme::kFile; }
  bool bucket_store() const { return scheme == UrlScheme::kS3 || scheme == UrlScheme::kGs; }
};

// kInvalidArgument naming the URL and what is wrong with it (an empty bucket, a file:// URL with a host,
// an unknown scheme, a URL with no host).
Result<ObjectUrl> parse_object_url(std::string_view url);

// Whether `url` names a remote object (s3, gs, http, https); a local path or file:// is not remote.
bool is_remote(std::string_view url);

// `name` inside the "directory" `url`: join("s3://b/prefix/", "index.chidx") and join("s3://b/prefix",
// "index.chidx") are both "s3://b/prefix/index.chidx"; a query of an http(s) URL stays at the end.
std::string join_url(std::string_view url, std::string_view name);

// 's' in single quotes, for messages.
std::string single_quoted(std::string_view s);

}  // namespace chute
