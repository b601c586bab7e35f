// Libraries chute loads at run time instead of linking them (libcurl: remote/curl_api.cc; libcudart and the
// driver, libcuda: gpu/cuda_device.cc), so that it builds without their headers and runs without them until
// they are needed. The one way to do it: dlopen() with the reason when it fails, dlsym() into a table of
// function pointers with the first name missing remembered, and the table kept for the process once it
// loaded (after a failure the next call tries again). Libraries are never dlclose()d: their functions are
// called for as long as the process lives.
// Thread-safety: open_library() and SymbolResolver are safe to use from any thread (a resolver on one thread
// at a time); ProcessApi::get() is safe to call from any thread.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>

namespace chute::detail {

// dlopen(name, RTLD_NOW | RTLD_LOCAL); with `only_if_loaded`, RTLD_NOLOAD too: the library the process has
// mapped already, or nothing. nullptr when it fails, with dlerror()'s reason (or "<name>: cannot be
// loaded") in *why.
void* open_library(const std::string& name, std::string* why, bool only_if_loaded = false);
// dlsym(library, name); nullptr when the library has no such symbol, or is nullptr (failed to open).
void* find_symbol(void* library, const char* name);

// Resolves a table's function pointers from one library, by name, and remembers the first it did not find:
//   SymbolResolver sym(library);
//   sym(api.curl_easy_init, "curl_easy_init");
//   if (const char* missing = sym.missing()) ... "libcurl.so.4 has no " + missing
class SymbolResolver {
 public:
  explicit SymbolResolver(void* library) : library_(library) {}

  template <class Fn>
  void operator()(Fn*& fn, const char* name) {
    fn = reinterpret_cast<Fn*>(find_symbol(library_, name));
    if (fn == nullptr && missing_ == nullptr) missing_ = name;
  }
  // The first name not found; nullptr when every one was.
  const char* missing() const { return missing_; }

 private:
  void* library_;
  const char* missing_ = nullptr;
};

// A function table as one attempt left it: complete, or why not.
template <class Api>
struct LoadedApi {
  Api api{};
  bool ok = false;
  std::string why;  // when !ok: what failed (a library that cannot be loaded, a symbol missing, a version)
};

// The process's one table of a library: get(load) returns the table of the first attempt that succeeded,
// published to later calls without a lock; until one does, each call makes an attempt (`load()`, a
// LoadedApi<Api>) and returns nullptr with its reason in *why. Keep one as a function-local static.
template <class Api>
class ProcessApi {
 public:
  template <class Load>
  const Api* get(Load&& load, std::string* why) {
    if (const Api* api = ready_.load(std::memory_order_acquire)) return api;
    std::lock_guard<std::mutex> lock(mu_);
    if (const Api* api = ready_.load(std::memory_order_relaxed)) return api;
    LoadedApi<Api> attempt = std::forward<Load>(load)();
    if (!attempt.ok) {  // not kept: the next call tries again
      if (why != nullptr) *why = std::move(attempt.why);
      return nullptr;
    }
    loaded_ = std::move(attempt);
    ready_.store(&loaded_.api, std::memory_order_release);
    return &loaded_.api;
  }

 private:
  std::mutex mu_;
  std::atomic<const Api*> ready_{nullptr};
  LoadedApi<Api> loaded_;  // written once, under mu_, before ready_ publishes it
};

}  // namespace chute::detail
