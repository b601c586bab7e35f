#include "chute/io/source.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace chute {

Status file_too_large(uint64_t size, uint64_t max_bytes) {
  return Status(StatusCode::kResourceExhausted, "file of " + std::to_string(size) + " bytes, over the limit of " +
                                                    std::to_string(max_bytes) +
                                                    " (max_file_bytes, the guard against reading a huge file whole)");
}

Status Source::read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const {
  CHUTE_RETURN_IF_ERROR(read(index, out));
  if (out.size() > max_bytes) {
    const uint64_t size = out.size();
    std::vector<uint8_t>().swap(out);  // do not keep what was just refused
    return file_too_large(size, max_bytes);
  }
  return Status::ok();
}

std::string path_below(const std::string& root, const std::string& path) {
  const std::string prefix = root + "/";  // the sources join their root and a relative path with one '/'
  return path.starts_with(prefix) ? path.substr(prefix.size()) : path;
}

std::string source_kind(const Source& source) {
  const char* mangled = typeid(source).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  std::string out = status == 0 && name != nullptr ? name.get() : mangled;
  const size_t scope = out.rfind("::");  // chute::ImageFolder -> ImageFolder
  return scope == std::string::npos ? out : out.substr(scope + 2);
}

}  // namespace chute
