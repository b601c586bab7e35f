// The S3 REST protocol, as pure functions: the requests chute sends (GetObject, HeadObject, ListObjectsV2,
// PutObject and the multipart upload calls) and the parsers of their responses. No I/O: HttpEngine sends
// the requests (and signs them with SigV4 through libcurl), ObjectStore strings them together.
//
// Keys are encoded as SigV4's canonical URI wants them (every byte but A-Z a-z 0-9 - . _ ~ and '/' as %XX),
// and query strings are sent already canonical (sorted by name, every value encoded, "uploads="), so that
// what libcurl signs is exactly what it sends and what S3 recomputes. (HttpEngine adds the
// x-amz-content-sha256 header S3 requires of signed requests.)
//
// XML: S3's responses are flat documents of a few known elements in a fixed vocabulary, whose text cannot
// hold a raw '<'. A small extractor (xml_elements() below) covers the five or so tags chute reads with
// entities decoded, and reports truncated documents; a general XML parser would be a new dependency for
// five tags.
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chute/base/status.h"
#include "chute/remote/http_engine.h"

namespace chute {

// Percent-encodes every byte but the unreserved ones (and '/' when keep_slash): SigV4's UriEncode().
std::string s3_uri_encode(std::string_view s, bool keep_slash);

// Where requests for one bucket go: its base URL (credentials.h, bucket_base_url()) and the signature.
struct S3Bucket {
  std::string base_url;  // no trailing '/'
  std::optional<SigV4> sigv4;
  std::string denied_hint;  // what a 403 to its requests adds (HttpRequest::denied_hint)
};

// The object's URL: base + "/" + encoded key.
std::string s3_object_url(const S3Bucket& bucket, std::string_view key);

HttpRequest s3_get_object(const S3Bucket& bucket, std::string_view key, uint64_t offset = 0, uint64_t length = 0);
HttpRequest s3_head_object(const S3Bucket& bucket, std::string_view key);
// max_keys 0: the server's default (1000). delimiter "/": only the keys directly under the prefix (deeper
// ones are rolled up into <CommonPrefixes>, which chute does not read).
HttpRequest s3_list_objects_v2(const S3Bucket& bucket, std::string_view prefix, std::string_view continuation_token,
                               int max_keys = 0, std::string_view delimiter = "");
HttpRequest s3_put_object(const S3Bucket& bucket, std::string_view key, std::vector<uint8_t> body);
HttpRequest s3_create_multipart_upload(const S3Bucket& bucket, std::string_view key);
HttpRequest s3_upload_part(const S3Bucket& bucket, std::string_view key, std::string_view upload_id, int part_number,
                           std::vector<uint8_t> body);
struct CompletedPart {
  int number = 0;
  std::string etag;  // as UploadPart's response header gave it (quoted)
};
HttpRequest s3_complete_multipart_upload(const S3Bucket& bucket, std::string_view key, std::string_view upload_id,
                                         const std::vector<CompletedPart>& parts);
HttpRequest s3_abort_multipart_upload(const S3Bucket& bucket, std::string_view key, std::string_view upload_id);

// ---- Responses ----------------------------------------------------------------------------------------

// Decodes the five XML entities and numeric character references (as UTF-8). kCorruptData is never used:
// a bad document is the server's failure, kIoError naming `what`.
Result<std::string> xml_unescape(std::string_view text, std::string_view what);
// Appends the code point `cp` to `out` as UTF-8 (XML character references; the \u escapes of the JSON
// that credential services answer, remote/credentials/credential_sources.cc).
void append_utf8(std::string& out, uint32_t cp);

// The text of every <tag>...</tag> (or <tag/>) directly found in `xml`, in order, still escaped. kIoError
// naming `what` when an element is opened and never closed (a truncated response).
Result<std::vector<std::string_view>> xml_elements(std::string_view xml, std::string_view tag, std::string_view what);

struct ListedObject {
  std::string key;  // unescaped
  uint64_t size = 0;
  std::string etag;  // without its quotes
};
struct ListPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // when truncated
};
// A ListObjectsV2 response (<ListBucketResult>). kIoError naming `what` for a truncated or malformed one
// (no closing </ListBucketResult>, a Size that is not a number, IsTruncated without a token).
Result<ListPage> parse_list_objects_v2(std::string_view xml, std::string_view what);

// The <UploadId> of a CreateMultipartUpload response.
Result<std::string> parse_upload_id(std::string_view xml, std::string_view what);

struct S3Error {
  std::string code, message;
};
// The <Error><Code>/<Message> of an error body, if it is one.
std::optional<S3Error> parse_s3_error(std::string_view xml);

// A CompleteMultipartUpload response: S3 may answer 200 with an <Error> body (the failure came after the
// headers were sent). kIoError with the code and message then, or kEnvironment for InternalError /
// SlowDown / ServiceUnavailable (the service, not the request); OK for <CompleteMultipartUploadResult>.
Status check_complete_multipart(std::string_view xml, std::string_view what);

// A HeadObject response: its Content-Length and ETag (unquoted; empty when absent). Also a ranged GET's
// answer (what stat falls back to where HEAD is refused): the size is then Content-Range's total.
struct HeadInfo {
  uint64_t size = 0;
  std::string etag;
};
Result<HeadInfo> parse_head_object(const HttpResponse& response, std::string_view what);

// UploadPart's ETag response header, as sent (quoted); kIoError when missing.
Result<std::string> parse_part_etag(const HttpResponse& response, std::string_view what);

// An ETag without its surrounding quotes; a weak one keeps its "W/" ("W/\"x\"" -> "W/x"): it names a
// version only loosely, so no If-Match is sent on it.
std::string unquote_etag(std::string_view etag);

}  // namespace chute
