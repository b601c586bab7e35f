// libFuzzer target: the parsers of S3's XML answers (s3_protocol.h) as ObjectStore calls them on a
// server's bytes: ListObjectsV2 pages, CreateMultipartUpload's UploadId, CompleteMultipartUpload's result
// or <Error>, and the entity decoder under them. Build: -DCHUTE_BUILD_FUZZERS=ON with clang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chute/remote/s3_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  auto page = chute::parse_list_objects_v2(xml, "fuzz");
  if (page.is_ok() && page->truncated && page->next_token.empty()) __builtin_trap();  // the parser's promise
  (void)chute::parse_upload_id(xml, "fuzz");
  (void)chute::parse_s3_error(xml);
  (void)chute::check_complete_multipart(xml, "fuzz");
  (void)chute::xml_unescape(xml, "fuzz");
  return 0;
}
