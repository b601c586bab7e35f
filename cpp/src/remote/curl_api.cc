#include "remote/detail/curl_api.h"

#include <cstdlib>

#include "base/detail/dynamic_library.h"

namespace chute::detail {
namespace {

LoadedApi<CurlApi> load_curl() {
  LoadedApi<CurlApi> out;
  std::string name = "libcurl.so.4";
  if (const char* env = std::getenv("CHUTE_LIBCURL"); env != nullptr && *env != '\0') name = env;
  void* lib = open_library(name, &out.why);
  if (lib == nullptr) return out;
  SymbolResolver sym(lib);
  CurlApi& a = out.api;
  sym(a.curl_global_init, "curl_global_init");
  sym(a.curl_version_info, "curl_version_info");
  sym(a.curl_easy_init, "curl_easy_init");
  sym(a.curl_easy_cleanup, "curl_easy_cleanup");
  sym(a.curl_easy_setopt, "curl_easy_setopt");
  sym(a.curl_easy_getinfo, "curl_easy_getinfo");
  sym(a.curl_easy_strerror, "curl_easy_strerror");
  sym(a.curl_slist_append, "curl_slist_append");
  sym(a.curl_slist_free_all, "curl_slist_free_all");
  sym(a.curl_multi_init, "curl_multi_init");
  sym(a.curl_multi_cleanup, "curl_multi_cleanup");
  sym(a.curl_multi_setopt, "curl_multi_setopt");
  sym(a.curl_multi_add_handle, "curl_multi_add_handle");
  sym(a.curl_multi_remove_handle, "curl_multi_remove_handle");
  sym(a.curl_multi_perform, "curl_multi_perform");
  sym(a.curl_multi_poll, "curl_multi_poll");
  sym(a.curl_multi_wakeup, "curl_multi_wakeup");
  sym(a.curl_multi_info_read, "curl_multi_info_read");
  sym(a.curl_multi_strerror, "curl_multi_strerror");
  if (const char* missing = sym.missing()) {  // never dlclose()d: a failed load is rare and retried
    out.why = name + " has no " + missing + " (libcurl >= 7.75 is needed)";
    return out;
  }
  const curl_version_info_data* v = a.curl_version_info(CURLVERSION_NOW);
  if (v == nullptr || v->version_num < kCurlMinVersion) {
    out.why = name + " is libcurl " + (v != nullptr && v->version != nullptr ? v->version : "?") +
              "; chute needs >= 7.75 (AWS SigV4)";
    return out;
  }
  a.version = v->version;
  if (CURLcode c = a.curl_global_init(CURL_GLOBAL_ALL); c != CURLE_OK) {
    out.why = name + ": curl_global_init failed: " + a.curl_easy_strerror(c);
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace

const CurlApi* curl_api(std::string* why) {
  static ProcessApi<CurlApi> curl;
  return curl.get(load_curl, why);
}

}  // namespace chute::detail
