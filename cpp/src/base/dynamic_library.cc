#include "base/detail/dynamic_library.h"

#include <dlfcn.h>

namespace chute::detail {

void* open_library(const std::string& name, std::string* why, bool only_if_loaded) {
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | (only_if_loaded ? RTLD_NOLOAD : 0));
  if (library == nullptr && why != nullptr) {
    const char* err = dlerror();
    *why = err != nullptr ? err : name + ": cannot be loaded";
  }
  return library;
}

// dlsym(nullptr, ...) would search the whole process (RTLD_DEFAULT): a library that failed to open has no
// symbols.
void* find_symbol(void* library, const char* name) { return library != nullptr ? dlsym(library, name) : nullptr; }

}  // namespace chute::detail
