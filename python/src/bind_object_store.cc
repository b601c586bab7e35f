// chute._native.ObjectStore: objects by URL (chute/object_store.h) over a native HttpEngine, for the
// remote source, `chute pack` to s3:// and tests; and chute._native.CredentialFeed, the feeder's side of
// its botocore credentials (chute/remote/credential_provider.h). Every call that may wait on the network
// runs interruptibly (bindings.h: Ctrl-C cancels it).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/remote/object_store.h"
#include "fs_path.h"

namespace chute::py {
namespace {

struct PyUpload {
  std::unique_ptr<Upload> impl;
};

struct PyCredentialFeed {
  std::shared_ptr<CredentialFeed> impl;
};

void check(const Status& st) {
  if (!st.is_ok()) throw_status(st);
}

nb::bytes to_bytes(const std::vector<uint8_t>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

std::span<const uint8_t> as_span(const nb::bytes& b) { return {static_cast<const uint8_t*>(b.data()), b.size()}; }

}  // namespace

void register_object_store(nb::module_& m) {
  m.def(
      "is_remote", [](const std::string& url) { return is_remote(url); }, nb::arg("url"),
      "Whether the URL names a remote object (s3://, gs://, http(s)://), not a local path or file://.");
  m.def(
      "join_url", [](const std::string& url, const std::string& name) { return join_url(url, name); }, nb::arg("url"),
      nb::arg("name"), "`name` inside the \"directory\" `url` (one '/' between them).");
  nb::class_<ObjectInfo>(m, "ObjectInfo")
      .def_ro("url", &ObjectInfo::url)
      .def_ro("size", &ObjectInfo::size)
      .def_ro("etag", &ObjectInfo::etag)
      .def("__repr__", [](const ObjectInfo& o) {
        return "ObjectInfo(url=" + redact_url(o.url) + ", size=" + std::to_string(o.size) + ", etag=" + o.etag + ")";
      });

  nb::class_<PyUpload>(m, "Upload")
      .def("write",
           [](PyUpload& u, nb::bytes data) {
             const std::span<const uint8_t> bytes = as_span(data);  // read with the GIL held
             check(call_interruptibly([&] { return u.impl->write(bytes); }));
           })
      .def("commit", [](PyUpload& u) { check(call_interruptibly([&] { return u.impl->commit(); })); })
      .def("abort", [](PyUpload& u) { check(call_interruptibly([&] { return u.impl->abort(); })); })
      .def_prop_ro("bytes_written", [](const PyUpload& u) { return u.impl->bytes_written(); })
      .def(
          "__enter__", [](PyUpload& u) -> PyUpload& { return u; }, nb::rv_policy::reference)
      .def(
          "__exit__",
          [](PyUpload& u, nb::handle type, nb::handle, nb::handle) {
            // The object appears only when the block ends without an exception.
            if (type.is_none()) {
              check(call_interruptibly([&] { return u.impl->commit(); }));
            } else {
              (void)call_interruptibly([&] { return u.impl->abort(); });
            }
            return false;
          },
          nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none());

  nb::class_<PyCredentialFeed>(m, "CredentialFeed")
      .def(
          "fileno", [](const PyCredentialFeed& f) { return f.impl->wait_fd(); },
          "Readable (select) when the store asks for credentials, or once it is gone (closed).")
      .def(
          "take_wanted", [](PyCredentialFeed& f) { return f.impl->take_wanted(); },
          "Whether the store asked since the last call (the ask is taken).")
      .def_prop_ro("closed", [](const PyCredentialFeed& f) { return f.impl->closed(); })
      .def(
          "close", [](PyCredentialFeed& f) { f.impl->close(); },
          "Ends the feed from the feeder's side (at exit): the store then waits for nothing from it.")
      .def(
          "push",
          [](PyCredentialFeed& f, std::string access_key, std::string secret_key, std::string session_token,
             std::optional<double> expiration_unix_s, std::string source) {
            AwsCredentials c{std::move(access_key), std::move(secret_key), std::move(session_token), std::nullopt,
                             std::move(source)};
            if (expiration_unix_s) {
              c.expiration =
                  std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
                      std::chrono::duration<double>(*expiration_unix_s)));
            }
            f.impl->push(std::move(c));
          },
          nb::arg("access_key"), nb::arg("secret_key"), nb::arg("session_token"), nb::arg("expiration").none(),
          nb::arg("source"))
      .def(
          "push_none", [](PyCredentialFeed& f, std::string tried) { f.impl->push_none(std::move(tried)); },
          nb::arg("tried"), "No credentials anywhere: requests go unsigned.")
      .def(
          "push_error", [](PyCredentialFeed& f, std::string error) { f.impl->push_error(std::move(error)); },
          nb::arg("error"), "Resolving them failed: the requests that need them fail so, and ask again.");

  nb::class_<PyObjectStore>(m, "ObjectStore")
      .def(
          "__init__",
          [](PyObjectStore* self, std::optional<std::map<std::string, std::string>> env, int list_max_keys,
             uint64_t part_bytes, int parts_in_flight, int max_retries, bool credential_feed) {
            EnvMap vars = process_environment();
            if (env) {
              for (auto& [k, v] : *env) vars[k] = v;  // "" unsets a variable
            }
            HttpOptions http;
            http.max_retries = max_retries;
            Result<std::shared_ptr<HttpEngine>> engine = HttpEngine::create(http);
            ObjectStoreOptions options{.list_max_keys = list_max_keys,
                                       .part_bytes = part_bytes,
                                       .parts_in_flight = parts_in_flight,
                                       .credential_feed = credential_feed ? unwrap(CredentialFeed::create()) : nullptr};
            new (self) PyObjectStore{unwrap(
                ObjectStore::create(engine.is_ok() ? engine.value() : nullptr, vars, disk_file_reader(), options))};
          },
          nb::arg("env") = nb::none(), nb::kw_only(), nb::arg("list_max_keys") = 0,
          nb::arg("part_bytes") = ObjectStoreOptions{}.part_bytes,
          nb::arg("parts_in_flight") = ObjectStoreOptions{}.parts_in_flight,
          nb::arg("max_retries") = HttpOptions{}.max_retries, nb::arg("credential_feed") = false,
          "env: variables that replace the process's (AWS_*, CHUTE_GS_*; '' unsets one). credential_feed: s3:// "
          "credentials come from the feed (ObjectStore.credential_feed: botocore, fed by chute.credentials), not "
          "the native sources.")
      .def_prop_ro("credential_feed",
                   [](const PyObjectStore& s) -> std::optional<PyCredentialFeed> {
                     if (s.impl->options().credential_feed == nullptr) return std::nullopt;
                     return PyCredentialFeed{s.impl->options().credential_feed};
                   })
      .def(
          "stat",
          [](const PyObjectStore& s, const std::string& url) {
            return unwrap(call_interruptibly([&] { return s.impl->stat(url); }));
          },
          nb::arg("url"))
      .def(
          "expand",
          [](const PyObjectStore& s, const std::string& pattern) {
            return unwrap(call_interruptibly([&] { return s.impl->expand(pattern); }));
          },
          nb::arg("pattern"), "Every object the pattern names (braces, then globs), sorted by URL.")
      .def(
          "read",
          [](const PyObjectStore& s, const std::string& url, uint64_t offset, uint64_t length) {
            return to_bytes(unwrap(call_interruptibly([&] { return s.impl->read(url, offset, length); })));
          },
          nb::arg("url"), nb::arg("offset"), nb::arg("length"))
      .def(
          "stats",
          [](const PyObjectStore& s) {
            return s.impl->engine() ? http_stats_dict(s.impl->engine()->stats()) : nb::dict();
          },
          "The HTTP engine's figures: requests, bytes, retries, failures, in flight (and its limit), latency "
          "p50/p99.")
      .def(
          "download",
          [](const PyObjectStore& s, const std::string& url, const FsPath& path) {
            // One version: a change between stat() and the last byte is an error naming the URL.
            Result<ObjectInfo> result = call_interruptibly([&]() -> Result<ObjectInfo> {
              CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, s.impl->stat(url));
              const int fd = ::open(path.value.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
              if (fd < 0) return io_error("cannot create '" + path.value + "': " + std::strerror(errno));
              Status st = s.impl->download(info, fd);
              if (::close(fd) != 0 && st.is_ok())
                st = io_error("cannot close '" + path.value + "': " + std::strerror(errno));
              if (!st.is_ok()) return st;
              return info;
            });
            return unwrap(std::move(result));
          },
          nb::arg("url"), nb::arg("path"), "The whole object into the file at `path`; returns its ObjectInfo.")
      .def(
          "put",
          [](const PyObjectStore& s, const std::string& url, nb::bytes data) {
            const std::span<const uint8_t> bytes = as_span(data);  // read with the GIL held
            check(call_interruptibly([&] { return s.impl->put(url, bytes); }));
          },
          nb::arg("url"), nb::arg("data"))
      .def(
          "begin_upload",
          [](const PyObjectStore& s, const std::string& url) {
            return PyUpload{unwrap(call_interruptibly([&] { return s.impl->begin_upload(url); }))};
          },
          nb::arg("url"), "An atomic write: the object appears on commit() (or at the end of a with block).")
      .def(
          "describe",
          [](const PyObjectStore& s, const std::string& scheme) {
            return s.impl->describe(scheme == "gs" ? UrlScheme::kGs : UrlScheme::kS3);
          },
          nb::arg("scheme") = "s3", "Where s3:// (or gs://) requests go and whose credentials sign them (no secret).");
}

}  // namespace chute::py
