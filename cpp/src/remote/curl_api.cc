#include "remote/detail/curl_api.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <type_traits>

namespace chute::detail {
namespace {

struct LoadedCurl {
  CurlApi api{};
  bool ok = false;
  std::string why;
};

LoadedCurl load_curl() {
  LoadedCurl out;
  std::string name = "libcurl.so.4";
  if (const char* env = std::getenv("CHUTE_LIBCURL"); env != nullptr && *env != '\0') name = env;
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    out.why = err != nullptr ? err : name + ": cannot be loaded";
    return out;
  }
  bool missing = false;
  auto sym = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (fn == nullptr && !missing) {
      missing = true;
      out.why = name + " has no " + symbol + " (libcurl >= 7.75 is needed)";
    }
  };
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
  if (missing) return out;  // never dlclose()d: a failed load is rare and retried
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

std::mutex curl_mu;

}  // namespace

const CurlApi* curl_api(std::string* why) {
  static std::atomic<const CurlApi*> ready{nullptr};
  static LoadedCurl loaded;  // written once, under curl_mu, before `ready` publishes it
  if (const CurlApi* api = ready.load(std::memory_order_acquire)) return api;
  std::lock_guard<std::mutex> lock(curl_mu);
  if (const CurlApi* api = ready.load(std::memory_order_relaxed)) return api;
  LoadedCurl attempt = load_curl();
  if (!attempt.ok) {
    if (why != nullptr) *why = attempt.why;
    return nullptr;
  }
  loaded = std::move(attempt);
  ready.store(&loaded.api, std::memory_order_release);
  return &loaded.api;
}

}  // namespace chute::detail
