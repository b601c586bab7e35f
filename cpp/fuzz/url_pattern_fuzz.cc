// libFuzzer target: what a user types as a dataset URL: URL parsing (object_url.h), brace expansion with a
// small cap, glob checks and matching (url_pattern.h), and the AWS config-file parser (credentials.h). The
// input is "pattern\0text": the text is matched against the pattern. Build: -DCHUTE_BUILD_FUZZERS=ON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chute/remote/credentials.h"
#include "chute/remote/object_url.h"
#include "chute/remote/url_pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view pattern = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  (void)chute::parse_object_url(pattern);
  (void)chute::join_url(pattern, text);
  auto names = chute::expand_braces(pattern, /*max=*/4096);
  if (names.is_ok() && names->size() > 4096) __builtin_trap();  // the cap holds
  if (chute::check_glob(pattern).is_ok()) {
    (void)chute::match_glob(pattern, text);
    (void)chute::glob_prefix(pattern);
  }
  (void)chute::parse_ini(std::string(input), "fuzz");
  return 0;
}
