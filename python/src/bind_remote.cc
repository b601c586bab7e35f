// chute._native.HttpEngine: the native HTTP(S) engine (chute/http_engine.h), for remote sources and tests.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/base/buffer_pool.h"
#include "chute/remote/http_engine.h"
#include "fs_path.h"

namespace chute::py {
namespace {

struct PyHttpEngine {
  std::shared_ptr<HttpEngine> impl;
};

// {"access_key", "secret_key", "session_token", "region", "service"}: the keys SigV4 has.
std::optional<SigV4> sigv4_from(const std::optional<nb::dict>& d) {
  if (!d) return std::nullopt;
  SigV4 s;
  for (auto [key, value] : *d) {
    const std::string k = nb::cast<std::string>(key);
    std::string v = nb::cast<std::string>(value);
    if (k == "access_key") {
      s.access_key = std::move(v);
    } else if (k == "secret_key") {
      s.secret_key = std::move(v);
    } else if (k == "session_token") {
      s.session_token = std::move(v);
    } else if (k == "region") {
      s.region = std::move(v);
    } else if (k == "service") {
      s.service = std::move(v);
    } else {
      throw nb::value_error(("sigv4: unknown key " + k).c_str());
    }
  }
  return s;
}

// A GET of a whole object (its ranges are the engine's to choose).
HttpRequest object_get(std::string url, std::vector<std::string> headers, const std::optional<nb::dict>& sigv4) {
  return HttpRequest{.method = "GET",
                     .url = std::move(url),
                     .headers = std::move(headers),
                     .offset = 0,
                     .length = 0,
                     .body = {},
                     .sigv4 = sigv4_from(sigv4)};
}

}  // namespace

nb::dict http_stats_dict(const HttpStats& s) {
  nb::dict d;
  d["requests"] = s.requests;
  d["bytes"] = s.bytes;
  d["retries"] = s.retries;
  d["failures"] = s.failures;
  d["in_flight"] = s.in_flight;
  d["in_flight_limit"] = s.in_flight_limit;
  d["latency_p50_s"] = s.latency_p50_s;
  d["latency_p99_s"] = s.latency_p99_s;
  return d;
}

void register_remote(nb::module_& m) {
  nb::class_<PyHttpEngine>(m, "HttpEngine")
      .def(
          "__init__",
          [](PyHttpEngine* self, int max_in_flight, int max_auto_in_flight, uint64_t max_memory, int max_retries,
             double backoff_base_s, double backoff_max_s, double connect_timeout_s, double stall_timeout_s) {
            HttpOptions o{.max_in_flight = max_in_flight,
                          .max_auto_in_flight = max_auto_in_flight,
                          .max_memory = max_memory,
                          .max_retries = max_retries,
                          .backoff_base_s = backoff_base_s,
                          .backoff_max_s = backoff_max_s,
                          .connect_timeout_s = connect_timeout_s,
                          .stall_timeout_s = stall_timeout_s};
            new (self) PyHttpEngine{unwrap(HttpEngine::create(o))};
          },
          nb::kw_only(), nb::arg("max_in_flight") = HttpOptions{}.max_in_flight,
          nb::arg("max_auto_in_flight") = HttpOptions{}.max_auto_in_flight,
          nb::arg("max_memory") = HttpOptions{}.max_memory, nb::arg("max_retries") = HttpOptions{}.max_retries,
          nb::arg("backoff_base_s") = HttpOptions{}.backoff_base_s,
          nb::arg("backoff_max_s") = HttpOptions{}.backoff_max_s,
          nb::arg("connect_timeout_s") = HttpOptions{}.connect_timeout_s,
          nb::arg("stall_timeout_s") = HttpOptions{}.stall_timeout_s,
          "Options by keyword (chute/http_engine.h, HttpOptions). max_in_flight=0: the I/O depth autotuned (Little's "
          "law), else fixed.")
      .def(
          "fetch",
          [](PyHttpEngine& e, std::string url, std::string method, std::vector<std::string> headers, uint64_t offset,
             uint64_t length, nb::bytes body, std::optional<nb::dict> sigv4) {
            HttpRequest r{.method = std::move(method),
                          .url = std::move(url),
                          .headers = std::move(headers),
                          .offset = offset,
                          .length = length,
                          .body = {},
                          .sigv4 = sigv4_from(sigv4)};
            const auto* data = static_cast<const uint8_t*>(body.data());
            r.body.assign(data, data + body.size());
            Result<HttpResponse> result = call_interruptibly([&] { return e.impl->fetch(std::move(r)); });
            HttpResponse response = unwrap(std::move(result));
            nb::dict header_dict;
            for (const auto& [name, value] : response.headers) header_dict[name.c_str()] = value;
            return nb::make_tuple(response.status, nb::bytes(response.body.data(), response.body.size()), header_dict);
          },
          nb::arg("url"), nb::arg("method") = "GET", nb::arg("headers") = std::vector<std::string>{},
          nb::arg("offset") = 0, nb::arg("length") = 0, nb::arg("body") = nb::bytes(""), nb::arg("sigv4") = nb::none(),
          "One request, blocking (without the GIL): (status, body, headers with lower-case names). "
          "length > 0: the bytes [offset, offset + length).")
      .def(
          "download",
          [](PyHttpEngine& e, std::string url, uint64_t size, const FsPath& path, uint64_t chunk_bytes,
             std::vector<std::string> headers, std::optional<nb::dict> sigv4, std::string etag) {
            const HttpRequest r = object_get(std::move(url), std::move(headers), sigv4);
            DownloadVersion version{.etag = std::move(etag)};
            Status status = call_interruptibly([&] {
              int fd = ::open(path.value.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
              if (fd < 0) return Status(StatusCode::kIoError, path.value + ": " + std::strerror(errno));
              Status s = e.impl->download(r, size, fd, version, chunk_bytes);
              if (::close(fd) != 0 && s.is_ok())
                s = Status(StatusCode::kIoError, path.value + ": " + std::strerror(errno));
              return s;
            });
            if (!status.is_ok()) throw_status(status);
            return version.etag;
          },
          nb::arg("url"), nb::arg("size"), nb::arg("path"), nb::arg("chunk_bytes") = uint64_t{8} << 20,
          nb::arg("headers") = std::vector<std::string>{}, nb::arg("sigv4") = nb::none(), nb::arg("etag") = "",
          "The object's bytes [0, size) into the file at `path`, by parallel ranged GETs of chunk_bytes, all of "
          "one version: `etag`'s (an error when it changed), or the first answer's (read again from the start "
          "when it changes meanwhile). Returns the ETag read ('' when the server sends none).")
      .def(
          "receive",
          [](PyHttpEngine& e, std::string url, uint64_t size, uint64_t chunk_bytes, std::vector<std::string> headers,
             std::optional<nb::dict> sigv4, std::string etag) {
            const HttpRequest r = object_get(std::move(url), std::move(headers), sigv4);
            PageBuffer buffer = unwrap(PageBuffer::allocate(size));
            DownloadVersion version{.etag = std::move(etag)};
            Status status =
                call_interruptibly([&] { return e.impl->receive(r, buffer.span().first(size), version, chunk_bytes); });
            if (!status.is_ok()) throw_status(status);
            return nb::bytes(reinterpret_cast<const char*>(buffer.data()), size);
          },
          nb::arg("url"), nb::arg("size"), nb::arg("chunk_bytes") = uint64_t{8} << 20,
          nb::arg("headers") = std::vector<std::string>{}, nb::arg("sigv4") = nb::none(), nb::arg("etag") = "",
          "The object's bytes [0, size), received in place by parallel ranged GETs of chunk_bytes, all of one "
          "version (as download()).")
      .def("stats", [](const PyHttpEngine& e) { return http_stats_dict(e.impl->stats()); });
  m.def(
      "redact_url", [](const std::string& url) { return redact_url(url); }, nb::arg("url"),
      "The URL with its credentials replaced by ***, as chute's messages show it.");
}

}  // namespace chute::py
