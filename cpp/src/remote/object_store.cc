#include "chute/remote/object_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <system_error>

#include "chute/base/environment.h"

namespace chute {

std::string object_display_name(std::string_view url) { return redact_url(url); }

namespace {

// `status` with `what` in front of its message: the object's URL before the engine's HTTP detail.
Status named(const Status& status, const std::string& what) {
  return Status(status.code(), what + ": " + status.message());
}

Result<ObjectInfo> stat_local(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_status(errno, "cannot stat '" + path + "'");
  if (!S_ISREG(st.st_mode)) return invalid_argument("'" + path + "' is not a regular file");
  return ObjectInfo{path, static_cast<uint64_t>(st.st_size), ""};
}

// Bytes [offset, offset + dst.size()) of the file into dst.
Status read_local(const std::string& path, uint64_t offset, std::span<uint8_t> dst) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "cannot open '" + path + "'");
  uint64_t done = 0;
  Status st;
  while (done < dst.size()) {
    const ssize_t n = ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = errno_status(errno, "cannot read '" + path + "'");
      break;
    }
    if (n == 0) {
      st = io_error("'" + path + "': bytes [" + std::to_string(offset) + ", " + std::to_string(offset + dst.size()) +
                    ") run past the end of the file");
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return st;
}

Status copy_local(const ObjectInfo& info, int fd) {
  const int in = ::open(info.url.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno_status(errno, "cannot open '" + info.url + "'");
  std::vector<uint8_t> chunk(1 << 20);
  uint64_t done = 0;
  Status st;
  while (st.is_ok()) {
    const ssize_t n = ::read(in, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) st = errno_status(errno, "cannot read '" + info.url + "'");
    if (n <= 0) break;
    for (ssize_t w = 0; w < n && st.is_ok();) {
      const ssize_t k = ::pwrite(fd, chunk.data() + w, static_cast<size_t>(n - w), static_cast<off_t>(done + w));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) st = errno_status(errno, "cannot write the copy of '" + info.url + "'");
      if (k > 0) w += k;
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(in);
  if (st.is_ok() && done != info.size) {
    st = io_error("'" + info.url + "' has " + std::to_string(done) + " bytes, not the " + std::to_string(info.size) +
                  " it had when listed (changed meanwhile?)");
  }
  return st;
}

// Regular files under `dir` (recursively, at most `max_depth` levels below it; -1: any), as `shown` + the
// path relative to dir.
Status walk_local(const std::string& dir, const std::string& shown, int max_depth, std::vector<std::string>& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir.empty() ? "." : dir, ec), end;
  if (ec) {
    const int err = ec.value();
    return errno_status(err, "cannot list '" + (dir.empty() ? std::string(".") : dir) + "'");
  }
  for (; it != end; it.increment(ec)) {
    if (ec) return errno_status(ec.value(), "cannot list '" + dir + "'");
    if (max_depth >= 0 && it.depth() >= max_depth) it.disable_recursion_pending();
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    out.push_back(shown + it->path().lexically_relative(dir.empty() ? "." : dir).generic_string());
  }
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<ObjectStore>> ObjectStore::create(std::shared_ptr<HttpEngine> engine, const EnvMap& env,
                                                         const FileReader& read_file, ObjectStoreOptions options) {
  if (options.part_bytes < (5ull << 20)) {
    return invalid_argument("ObjectStore part_bytes " + std::to_string(options.part_bytes) +
                            " is below S3's minimum part size of 5 MiB");
  }
  if (options.parts_in_flight < 1) {
    return invalid_argument("ObjectStore parts_in_flight must be >= 1, not " + std::to_string(options.parts_in_flight));
  }
  if (options.list_max_keys < 0 || options.list_max_keys > 1000) {
    return invalid_argument("ObjectStore list_max_keys must be in [0, 1000], not " +
                            std::to_string(options.list_max_keys));
  }
  Result<S3Config> s3 = resolve_s3_config(env, read_file);
  std::shared_ptr<CredentialProvider> credentials;
  if (s3.is_ok()) credentials = CredentialProvider::create(s3.value(), engine, read_file, options.credential_feed);
  return std::shared_ptr<ObjectStore>(new ObjectStore(std::move(engine), std::move(s3), resolve_gs_config(env),
                                                      std::move(options), std::move(credentials)));
}

Result<S3Bucket> ObjectStore::bucket(const ObjectUrl& url) const {
  const Result<S3Config>& config = this->config(url.scheme);
  if (!config.is_ok()) return named(config.status(), url.text);
  S3Bucket b{bucket_base_url(config.value(), url.bucket), std::nullopt, {}};
  if (url.scheme == UrlScheme::kGs) {
    b.sigv4 = config.value().sigv4();
    b.denied_hint = b.sigv4 ? "signed with the HMAC key from CHUTE_GS_ACCESS_KEY_ID: check it, and its "
                              "permissions on this object"
                            : "the request was unsigned: a private bucket needs CHUTE_GS_ACCESS_KEY_ID and "
                              "CHUTE_GS_SECRET_ACCESS_KEY (HMAC keys)";
    return b;
  }
  Result<std::optional<AwsCredentials>> credentials = s3_credentials_->current();
  if (!credentials.is_ok()) return named(credentials.status(), url.text);
  if (const std::optional<AwsCredentials>& c = credentials.value()) {
    b.sigv4 = SigV4{c->access_key, c->secret_key, c->session_token, config.value().region, config.value().service};
    b.denied_hint = "signed with the credentials from " + c->source +
                    ": check them, and that they may read this object (s3:GetObject; s3:ListBucket to list)";
  } else {
    b.denied_hint = "the request was unsigned: no credentials were found (tried: " + s3_credentials_->tried() +
                    "); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or give the job a role "
                    "(an instance profile, EKS IRSA or Pod Identity)";
  }
  return b;
}

std::string ObjectStore::describe(UrlScheme scheme) const {
  const Result<S3Config>& c = config(scheme);
  if (!c.is_ok()) return c.status().message();
  if (scheme == UrlScheme::kGs) return c.value().to_string();
  S3Config shown = c.value();  // the endpoint and region; the credentials as the provider holds them now
  bool known = false;
  const std::optional<AwsCredentials> now = s3_credentials_->peek(&known);
  shown.access_key = now ? now->access_key : "";
  shown.session_token = now ? now->session_token : "";
  shown.source = now ? now->source : "";
  if (known) return shown.to_string();
  return shown.to_string() + " so far: " +
         (options_.credential_feed ? "botocore's chain is asked"
                                   : "web identity, container and instance role are tried") +
         " at the first signed request";
}

Result<HttpResponse> ObjectStore::fetch(HttpRequest request, const std::string& what) const {
  if (engine_ == nullptr) {
    return unsupported(what + ": remote objects need the HTTP engine, which could not start (libcurl.so.4)");
  }
  Result<HttpResponse> response = engine_->fetch(std::move(request));
  if (!response.is_ok()) return named(response.status(), what);
  return response;
}

Result<HttpRequest> ObjectStore::request_for(std::string_view url) const {
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(url));
  if (!parsed.remote()) return invalid_argument(single_quoted(url) + " is a local path, not a remote object");
  if (!parsed.bucket_store()) {
    HttpRequest r;
    r.url = parsed.path;
    return r;
  }
  if (parsed.key.empty() || parsed.key.back() == '/') {
    return invalid_argument(single_quoted(url) + " names a bucket or a prefix, not an object");
  }
  CHUTE_ASSIGN_OR_RETURN(S3Bucket b, bucket(parsed));
  return s3_get_object(b, parsed.key);
}

Result<ObjectInfo> ObjectStore::stat(std::string_view url) const {
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(url));
  if (!parsed.remote()) return stat_local(parsed.path);
  CHUTE_ASSIGN_OR_RETURN(HttpRequest request, request_for(url));
  request.method = "HEAD";
  const std::string what = object_display_name(url);
  Result<HttpResponse> response = fetch(std::move(request), what);
  if (!response.is_ok() && response.status().code() == StatusCode::kIoError && !parsed.bucket_store())
    return stat_by_get(url);
  if (!response.is_ok()) return response.status();
  CHUTE_ASSIGN_OR_RETURN(HeadInfo head, parse_head_object(response.value(), "HEAD " + what));
  return ObjectInfo{std::string(url), head.size, head.etag};
}

Result<ObjectInfo> ObjectStore::stat_by_get(std::string_view url) const {
  // A plain URL whose HEAD was refused (403, 405): a presigned URL is signed for GET only, and some
  // servers answer HEAD with an error. Its first byte's answer names the size (Content-Range) and ETag.
  CHUTE_ASSIGN_OR_RETURN(HttpRequest request, request_for(url));
  request.offset = 0;
  request.length = 1;
  const std::string what = object_display_name(url);
  CHUTE_ASSIGN_OR_RETURN(HttpResponse response, fetch(std::move(request), what));
  CHUTE_ASSIGN_OR_RETURN(HeadInfo head, parse_head_object(response, "GET " + what));
  return ObjectInfo{std::string(url), head.size, head.etag};
}

Result<std::vector<uint8_t>> ObjectStore::read(std::string_view url, uint64_t offset, uint64_t length) const {
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(url));
  if (length == 0) return std::vector<uint8_t>();
  if (!parsed.remote()) {
    std::vector<uint8_t> out(length);
    CHUTE_RETURN_IF_ERROR(read_local(parsed.path, offset, out));
    return out;
  }
  CHUTE_ASSIGN_OR_RETURN(HttpRequest request, request_for(url));
  request.offset = offset;
  request.length = length;
  CHUTE_ASSIGN_OR_RETURN(HttpResponse response, fetch(std::move(request), object_display_name(url)));
  return std::move(response.body);
}

Status ObjectStore::download(const ObjectInfo& info, int fd, bool* changed) const {
  if (changed != nullptr) *changed = false;
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(info.url));
  if (!parsed.remote()) return copy_local(ObjectInfo{parsed.path, info.size, info.etag}, fd);
  CHUTE_ASSIGN_OR_RETURN(HttpRequest request, request_for(info.url));
  if (engine_ == nullptr) return fetch(request, object_display_name(info.url)).status();
  DownloadVersion version{.etag = info.etag};
  const Status st = engine_->download(request, info.size, fd, version);
  if (changed != nullptr) *changed = version.changed;
  return st.is_ok() ? st : named(st, object_display_name(info.url));
}

Status ObjectStore::receive(const ObjectInfo& info, std::span<uint8_t> dst, bool* changed) const {
  if (changed != nullptr) *changed = false;
  if (dst.size() != info.size)
    return invalid_argument("receive: a buffer of " + std::to_string(dst.size()) + " bytes for " +
                            object_display_name(info.url) + ", which has " + std::to_string(info.size));
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(info.url));
  if (!parsed.remote()) {
    CHUTE_RETURN_IF_ERROR(read_local(parsed.path, 0, dst));
    Result<ObjectInfo> now = stat_local(parsed.path);  // a file that grew is not the one listed either
    if (now.is_ok() && now->size != info.size)
      return io_error("'" + parsed.path + "' has " + std::to_string(now->size) + " bytes, not the " +
                      std::to_string(info.size) + " it had when listed (changed meanwhile?)");
    return Status::ok();
  }
  CHUTE_ASSIGN_OR_RETURN(HttpRequest request, request_for(info.url));
  if (engine_ == nullptr) return fetch(request, object_display_name(info.url)).status();
  DownloadVersion version{.etag = info.etag};
  const Status st = engine_->receive(request, dst, version);
  if (changed != nullptr) *changed = version.changed;
  return st.is_ok() ? st : named(st, object_display_name(info.url));
}

Result<std::vector<ObjectInfo>> ObjectStore::stat_many(const std::vector<std::string>& urls) const {
  std::vector<ObjectInfo> out;
  if (urls.size() <= 1 || engine_ == nullptr) {
    for (const std::string& url : urls) {
      CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, stat(url));
      out.push_back(std::move(info));
    }
    return out;
  }
  // Submitted together, so that the engine keeps its in-flight limit busy (128 shards at 20 ms each are
  // 2.6 s one after another). A callback keeps its promise alive if this returns early on an error.
  std::vector<std::future<Result<HttpResponse>>> responses(urls.size());  // invalid: a local file
  for (size_t i = 0; i < urls.size(); ++i) {
    CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(urls[i]));
    if (!parsed.remote()) continue;
    CHUTE_ASSIGN_OR_RETURN(HttpRequest request, request_for(urls[i]));
    request.method = "HEAD";
    auto promise = std::make_shared<std::promise<Result<HttpResponse>>>();
    responses[i] = promise->get_future();
    engine_->submit(std::move(request), [promise](Result<HttpResponse> r) { promise->set_value(std::move(r)); });
  }
  for (size_t i = 0; i < urls.size(); ++i) {
    if (!responses[i].valid()) {
      CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, stat(urls[i]));
      out.push_back(std::move(info));
      continue;
    }
    const std::string what = object_display_name(urls[i]);
    Result<HttpResponse> response = responses[i].get();
    if (!response.is_ok() && response.status().code() == StatusCode::kIoError &&
        !parse_object_url(urls[i])->bucket_store()) {  // HEAD refused: see stat_by_get
      CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, stat_by_get(urls[i]));
      out.push_back(std::move(info));
      continue;
    }
    if (!response.is_ok()) return named(response.status(), what);
    CHUTE_ASSIGN_OR_RETURN(HeadInfo head, parse_head_object(response.value(), "HEAD " + what));
    out.push_back(ObjectInfo{urls[i], head.size, head.etag});
  }
  return out;
}

Result<std::optional<std::vector<ListedObject>>> ObjectStore::list_keys(const ObjectUrl& url, const std::string& prefix,
                                                                        bool one_level, size_t limit) const {
  CHUTE_ASSIGN_OR_RETURN(S3Bucket b, bucket(url));
  const std::string what = "LIST " + std::string(url_scheme_name(url.scheme)) + "://" + url.bucket + "/" + prefix;
  std::vector<ListedObject> out;
  std::string token;
  for (;;) {
    CHUTE_ASSIGN_OR_RETURN(
        HttpResponse response,
        fetch(s3_list_objects_v2(b, prefix, token, options_.list_max_keys, one_level ? "/" : ""), what));
    const std::string_view xml(reinterpret_cast<const char*>(response.body.data()), response.body.size());
    CHUTE_ASSIGN_OR_RETURN(ListPage page, parse_list_objects_v2(xml, what));
    for (ListedObject& o : page.objects) {
      if (!o.key.empty() && o.key.back() != '/') out.push_back(std::move(o));  // '/' markers hold no data
    }
    if (limit > 0 && out.size() > limit) return std::optional<std::vector<ListedObject>>();
    if (!page.truncated) break;
    if (page.next_token == token) return io_error(what + ": the server repeated its continuation token");
    token = std::move(page.next_token);
  }
  return std::optional<std::vector<ListedObject>>(std::move(out));
}

Result<std::vector<ObjectInfo>> ObjectStore::list(const ObjectUrl& url, const std::string& key_pattern,
                                                  bool everything) const {
  const std::string prefix = everything ? unescape_pattern(key_pattern) : glob_prefix(key_pattern);
  CHUTE_ASSIGN_OR_RETURN(std::optional<std::vector<ListedObject>> listed, list_keys(url, prefix, false, 0));
  const std::string base = std::string(url_scheme_name(url.scheme)) + "://" + url.bucket + "/";
  std::vector<ObjectInfo> out;
  for (ListedObject& o : *listed) {
    if (everything || match_glob(key_pattern, o.key))
      out.push_back(ObjectInfo{base + o.key, o.size, std::move(o.etag)});
  }
  return out;
}

Result<std::vector<ObjectInfo>> ObjectStore::stat_names(const std::vector<std::string>& urls) const {
  // Many names in one bucket directory (train-{0000..1023}.tar): one listing of the directory under their
  // common prefix answers for all of them in a request per 1000 keys, where a HEAD each would take
  // N / in-flight round trips. Names spread thinly over a large directory (the listing would exceed
  // 4 N + 1000 keys) and small groups get HEADs.
  constexpr size_t kListFrom = 16;
  std::map<std::string, std::vector<size_t>> groups;  // "scheme://bucket/dir/" -> indices into urls
  std::vector<ObjectUrl> parsed(urls.size());
  for (size_t i = 0; i < urls.size(); ++i) {
    CHUTE_ASSIGN_OR_RETURN(parsed[i], parse_object_url(urls[i]));
    if (!parsed[i].bucket_store()) continue;
    const std::string& key = parsed[i].key;
    groups[std::string(url_scheme_name(parsed[i].scheme)) + "://" + parsed[i].bucket + "/" +
           key.substr(0, key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1)]
        .push_back(i);
  }
  std::vector<std::optional<ObjectInfo>> found(urls.size());
  for (const auto& [dir, members] : groups) {
    if (members.size() < kListFrom) continue;
    std::string prefix = parsed[members.front()].key;
    for (size_t i : members) {
      const std::string& key = parsed[i].key;
      size_t n = 0;
      while (n < prefix.size() && n < key.size() && prefix[n] == key[n]) ++n;
      prefix.resize(n);
    }
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::vector<ListedObject>> listed,
                           list_keys(parsed[members.front()], prefix, true, 4 * members.size() + 1000));
    if (!listed) continue;  // too many other keys there: HEADs after all
    std::map<std::string_view, const ListedObject*> by_key;
    for (const ListedObject& o : *listed) by_key.emplace(o.key, &o);
    for (size_t i : members) {
      auto it = by_key.find(parsed[i].key);
      if (it == by_key.end()) {
        const ObjectUrl& u = parsed[i];
        return Status(StatusCode::kNotFound, object_display_name(urls[i]) + ": no such object (not in the listing of " +
                                                 url_scheme_name(u.scheme) + "://" + u.bucket + "/" + prefix + "*)");
      }
      found[i] = ObjectInfo{urls[i], it->second->size, it->second->etag};
    }
  }
  std::vector<std::string> rest;
  for (size_t i = 0; i < urls.size(); ++i) {
    if (!found[i]) rest.push_back(urls[i]);
  }
  CHUTE_ASSIGN_OR_RETURN(std::vector<ObjectInfo> stated, stat_many(rest));
  std::vector<ObjectInfo> out;
  for (auto& f : found) {
    if (f) out.push_back(std::move(*f));
  }
  for (ObjectInfo& info : stated) out.push_back(std::move(info));
  return out;
}

Result<std::vector<ObjectInfo>> ObjectStore::expand_one(const std::string& name, const std::string& pattern,
                                                        std::vector<std::string>& to_stat) const {
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl url, parse_object_url(name));
  std::vector<ObjectInfo> out;
  if (url.bucket_store()) {
    const bool everything = url.key.empty() || url.key.back() == '/';
    if (everything || has_glob(url.key)) {
      CHUTE_RETURN_IF_ERROR(check_glob(url.key));
      return list(url, url.key, everything);
    }
    to_stat.push_back(url_scheme_name(url.scheme) + std::string("://") + url.bucket + "/" + unescape_pattern(url.key));
    return out;
  }
  if (url.remote()) {
    const std::string_view path = std::string_view(url.path).substr(0, url.path.find_first_of("?#"));
    if (path.find_first_of("*[") != std::string_view::npos) {
      return invalid_argument("pattern '" + object_display_name(pattern) +
                              "': http(s) URLs take braces only, not globs (an HTTP server cannot be listed)");
    }
    if (path.back() == '/') {
      return invalid_argument(single_quoted(object_display_name(name)) +
                              " ends in '/': an HTTP server cannot be listed; name the objects (braces work)");
    }
    to_stat.push_back(name);
    return out;
  }
  const std::string& path = url.path;
  const bool everything = !path.empty() && path.back() == '/';
  if (!everything && !has_glob(path)) {
    CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, stat_local(unescape_pattern(path)));
    out.push_back(std::move(info));
    return out;
  }
  CHUTE_RETURN_IF_ERROR(check_glob(path));
  const std::string prefix = everything ? unescape_pattern(path) : glob_prefix(path);
  const std::string dir = prefix.substr(0, prefix.rfind('/') == std::string::npos ? 0 : prefix.rfind('/') + 1);
  // The pattern's '/' after dir bound how deep a match can be (no glob character crosses '/').
  const int depth =
      everything
          ? -1
          : static_cast<int>(std::count(path.begin(), path.end(), '/') - std::count(dir.begin(), dir.end(), '/'));
  std::vector<std::string> files;
  CHUTE_RETURN_IF_ERROR(walk_local(dir, dir, depth, files));
  for (const std::string& f : files) {
    if (!everything && !match_glob(path, f)) continue;
    CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, stat_local(f));
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::vector<ObjectInfo>> ObjectStore::expand(std::string_view pattern) const {
  CHUTE_ASSIGN_OR_RETURN(std::vector<std::string> names, expand_braces(pattern));
  std::vector<ObjectInfo> out;
  std::vector<std::string> to_stat;  // remote names with no glob: HEAD requests, all in flight at once
  for (const std::string& name : names) {
    CHUTE_ASSIGN_OR_RETURN(std::vector<ObjectInfo> found, expand_one(name, std::string(pattern), to_stat));
    for (ObjectInfo& info : found) out.push_back(std::move(info));
  }
  CHUTE_ASSIGN_OR_RETURN(std::vector<ObjectInfo> stated, stat_names(to_stat));
  for (ObjectInfo& info : stated) out.push_back(std::move(info));
  std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.url < b.url; });
  out.erase(
      std::unique(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.url == b.url; }),
      out.end());
  if (out.empty()) return Status(StatusCode::kNotFound, "no object matches '" + object_display_name(pattern) + "'");
  return out;
}

}  // namespace chute
