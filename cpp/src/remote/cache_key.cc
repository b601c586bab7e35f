#include "chute/remote/cache_key.h"

#include <cstdio>

#include "chute/remote/http_engine.h"

namespace chute {
namespace {

// The format, once: the URL without credentials, '#', what names the bytes.
std::string key(std::string_view url, std::string_view version) { return redact_url(url) + "#" + std::string(version); }

}  // namespace

std::string cache_key(const ObjectInfo& object) {
  return key(object.url, object.etag + "#" + std::to_string(object.size));
}

std::string cache_key(std::string_view url, uint64_t content_id) {
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(content_id));
  return key(url, id);
}

}  // namespace chute
