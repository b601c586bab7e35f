// ObjectStore: objects named by URL (object_url.h) on S3, S3-compatible stores, GCS, HTTP(S) servers and
// the local disk, behind one interface: stat, expand a pattern into objects, ranged reads, whole-object
// downloads, and writes (one PUT, or an atomic multipart Upload).
//
// Remote requests go through a shared HttpEngine (retries, keep-alive, SigV4 signing by libcurl); S3 and
// GCS requests are built by s3_protocol.h with the configuration of credentials.h, resolved once at
// create(). An error there (a half-set key pair, a missing AWS_PROFILE) is reported by the first s3:// (or
// gs://) call, so that local paths keep working. s3:// requests are signed with what the
// CredentialProvider (credential_provider.h) has at the time: fixed keys, a cloud job's temporary
// credentials (fetched at the first signed request, refreshed before they expire), or botocore's, through
// a CredentialFeed. A 401/403 answer names whose credentials signed the request, or, for an unsigned one,
// every source that was tried and how to set one.
//
// Errors name the object's URL (with credentials redacted), never the secret: kNotFound for a missing
// bucket or key (and a pattern that matches nothing), kInvalidArgument for a bad URL or pattern, the
// engine's kIoError / kEnvironment for refused requests and failures that outlasted the retries.
//
// Thread-safety: an ObjectStore is immutable after create(); every member may be called from any thread.
// An Upload belongs to one thread at a time; it keeps its ObjectStore alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chute/base/status.h"
#include "chute/remote/credential_provider.h"
#include "chute/remote/credentials.h"
#include "chute/remote/http_engine.h"
#include "chute/remote/object_url.h"
#include "chute/remote/s3_protocol.h"
#include "chute/remote/url_pattern.h"

namespace chute {

struct ObjectInfo {
  std::string url;  // remote: the URL; local: the plain path
  uint64_t size = 0;
  std::string etag;  // unquoted; empty for local files and servers that send none
};

struct ObjectStoreOptions {
  int list_max_keys = 0;             // ListObjectsV2 page size; 0: the server's (1000)
  uint64_t part_bytes = 8ull << 20;  // multipart part size; S3's minimum is 5 MiB (but the last part)
  int parts_in_flight = 4;           // parts uploading while the next one fills (memory: this many parts)
  // Set: s3:// credentials come from this feed (botocore, fed by the Python package), not the native
  // sources; the configuration still gives the region and endpoint.
  std::shared_ptr<CredentialFeed> credential_feed;
};

// A write that appears whole or not at all: parts are buffered and uploaded as they fill (several in flight
// while the next part fills), and the object appears on commit(). abort(), or destroying an Upload that was not
// committed, removes what was uploaded.
class Upload {
 public:
  virtual ~Upload() = default;
  virtual Status write(std::span<const uint8_t> bytes) = 0;
  virtual Status commit() = 0;  // after it, write() and commit() are errors
  virtual Status abort() = 0;   // idempotent; a no-op after commit()
  virtual uint64_t bytes_written() const = 0;
};

class ObjectStore : public std::enable_shared_from_this<ObjectStore> {
 public:
  // `engine` may be null: remote URLs are then an error naming libcurl (local ones work).
  static Result<std::shared_ptr<ObjectStore>> create(std::shared_ptr<HttpEngine> engine, const EnvMap& env,
                                                     const FileReader& read_file = disk_file_reader(),
                                                     ObjectStoreOptions options = {});

  // Size and ETag by HEAD; for a plain http(s) URL whose HEAD is refused (a presigned GET-only URL), by a
  // GET of its first byte.
  Result<ObjectInfo> stat(std::string_view url) const;
  // stat() of each URL, in order; the remote ones' HEAD requests all in flight together.
  Result<std::vector<ObjectInfo>> stat_many(const std::vector<std::string>& urls) const;
  // Braces first, then globs: listed through ListObjectsV2 for s3/gs and the directory for local paths
  // (http(s) takes braces only); a URL ending in '/' is every object under it. Sorted by URL, duplicates
  // once; nothing at all is kNotFound naming the pattern.
  Result<std::vector<ObjectInfo>> expand(std::string_view pattern) const;
  // Bytes [offset, offset + length) of the object; all of them or an error.
  Result<std::vector<uint8_t>> read(std::string_view url, uint64_t offset, uint64_t length) const;
  // The whole object (info.size bytes, as stat() or expand() found it) into `fd` at offset 0, every byte
  // of one version (HttpEngine::download): info.etag's when it has one, else the first answer's (an object
  // that changes meanwhile is read again from the start). An object that no longer has info.etag fails
  // naming its URL, with *changed set (when given): stat() it again.
  Status download(const ObjectInfo& info, int fd, bool* changed = nullptr) const;
  // The same into `dst` (info.size bytes): for a remote object, every range received in place
  // (HttpEngine::receive); a local file is read.
  Status receive(const ObjectInfo& info, std::span<uint8_t> dst, bool* changed = nullptr) const;
  // The object becomes `bytes` in one request (a local file: write to a temporary, then rename).
  Status put(std::string_view url, std::span<const uint8_t> bytes) const;
  Result<std::unique_ptr<Upload>> begin_upload(std::string_view url) const;

  // The GET request for a remote object (signed when the store has credentials): what ObjectStore itself
  // sends, for callers that drive the HttpEngine directly. kInvalidArgument for a local path.
  Result<HttpRequest> request_for(std::string_view url) const;

  const std::shared_ptr<HttpEngine>& engine() const { return engine_; }
  const ObjectStoreOptions& options() const { return options_; }
  // The configuration for s3:// or gs://.
  const Result<S3Config>& config(UrlScheme scheme) const { return scheme == UrlScheme::kGs ? gs_ : s3_; }
  // Where requests for `scheme` go and whose credentials sign them, safe to print (the access key's first
  // characters at most): "endpoint=AWS region=us-east-1 credentials=ASIA... (instance metadata (role r))".
  // Temporary credentials not fetched yet are said to be, not fetched.
  std::string describe(UrlScheme scheme) const;

 private:
  ObjectStore(std::shared_ptr<HttpEngine> engine, Result<S3Config> s3, Result<S3Config> gs, ObjectStoreOptions o,
              std::shared_ptr<CredentialProvider> s3_credentials)
      : engine_(std::move(engine)),
        s3_(std::move(s3)),
        gs_(std::move(gs)),
        options_(std::move(o)),
        s3_credentials_(std::move(s3_credentials)) {}
  friend class S3Upload;

  Result<S3Bucket> bucket(const ObjectUrl& url) const;
  Result<HttpResponse> fetch(HttpRequest request, const std::string& what) const;
  Result<ObjectInfo> stat_by_get(std::string_view url) const;
  // The objects under `prefix` in url's bucket ('/' markers left out); one_level: only those directly under
  // it (delimiter '/'). std::nullopt once there are more than `limit` (0: no limit).
  Result<std::optional<std::vector<ListedObject>>> list_keys(const ObjectUrl& url, const std::string& prefix,
                                                             bool one_level, size_t limit) const;
  Result<std::vector<ObjectInfo>> list(const ObjectUrl& url, const std::string& key_pattern, bool everything) const;
  // stat() of names with no glob: a directory's many names by listing it, the rest by stat_many().
  Result<std::vector<ObjectInfo>> stat_names(const std::vector<std::string>& urls) const;
  // The objects `name` (one brace expansion of `pattern`) lists; a remote name with no glob goes to to_stat.
  Result<std::vector<ObjectInfo>> expand_one(const std::string& name, const std::string& pattern,
                                             std::vector<std::string>& to_stat) const;

  std::shared_ptr<HttpEngine> engine_;
  Result<S3Config> s3_, gs_;
  ObjectStoreOptions options_;
  std::shared_ptr<CredentialProvider> s3_credentials_;  // null when s3_ is an error
};

// The object's display name for messages: the URL with credentials removed.
std::string object_display_name(std::string_view url);

}  // namespace chute
