// Object URLs: where a shard lives (s3://, gs://, http(s)://, file://, a plain path), and the patterns that
// name many shards at once (bash-like braces, then globs matched against listed keys).
//
//   s3://bucket/key          S3 or an S3-compatible store (credentials.h says which endpoint)
//   gs://bucket/key          Google Cloud Storage through its S3 interoperability API
//   http://host/path, https://host/path
//   file:///abs/path         percent-decoded; only an empty host or "localhost"
//   path                     a local path, as given
//
// Patterns: braces are expanded first, like bash: {a,b,c} (nested, several per pattern) and integer or
// letter ranges {0000..0127} (zero-padded to the wider end when either end has a leading zero, like bash),
// {10..1}, {0..100..5}, {a..e}. Then globs: `*` (any run of characters but '/'), `?` (one character but
// '/'), `[abc]`, `[a-z]`, `[!abc]` / `[^abc]`. A backslash makes the next character literal in both stages.
// Globs need a listing (s3://, gs://, local paths); http(s) takes braces only.
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chute/status.h"

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

// The most names one pattern may expand to: beyond, expand_braces() refuses (a typo like {0..99999999}).
inline constexpr size_t kMaxBraceExpansions = 1'000'000;

// Every name `pattern` stands for, in bash's order; backslash escapes are kept for match_glob().
// kInvalidArgument naming the pattern on an unbalanced brace, an empty {} or a group of one item with no
// ',' or '..' ({abc}: escape literal braces as \{abc\}), a bad range ({1..b}), or more than `max` names.
Result<std::vector<std::string>> expand_braces(std::string_view pattern, size_t max = kMaxBraceExpansions);

// Whether `s` holds an unescaped glob character (* ? [).
bool has_glob(std::string_view s);

// kInvalidArgument naming the pattern when a '[' is never closed or the pattern ends in a lone backslash.
Status check_glob(std::string_view pattern);

// Whether `text` matches `pattern` (see above; `*` and `?` never match '/'). The pattern must pass
// check_glob(); a malformed one matches nothing.
bool match_glob(std::string_view pattern, std::string_view text);

// The literal text before the first glob character, escapes removed: the prefix to list under.
std::string glob_prefix(std::string_view pattern);

// 's' in single quotes, for messages.
std::string single_quoted(std::string_view s);

// `s` with its backslash escapes removed (a pattern with no glob, as a literal name).
std::string unescape_pattern(std::string_view s);

}  // namespace chute
