#include "chute/remote/s3_protocol.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace chute {

std::string s3_uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string s3_object_url(const S3Bucket& bucket, std::string_view key) {
  return bucket.base_url + "/" + s3_uri_encode(key, /*keep_slash=*/true);
}

namespace {

using Query = std::vector<std::pair<std::string, std::string>>;

// A canonical query string: sorted by name, names and values encoded, "name=" for an empty value.
std::string canonical_query(Query query) {
  for (auto& [name, value] : query) {
    name = s3_uri_encode(name, false);
    value = s3_uri_encode(value, false);
  }
  std::sort(query.begin(), query.end());
  std::string out;
  for (const auto& [name, value] : query) {
    if (!out.empty()) out += '&';
    out += name + "=" + value;
  }
  return out;
}

HttpRequest make(const S3Bucket& bucket, std::string method, std::string url) {
  HttpRequest r;
  r.method = std::move(method);
  r.url = std::move(url);
  r.sigv4 = bucket.sigv4;
  r.denied_hint = bucket.denied_hint;
  return r;
}

HttpRequest object_request(const S3Bucket& bucket, const char* method, std::string_view key, const Query& query) {
  std::string url = s3_object_url(bucket, key);
  if (!query.empty()) {
    url += '?';
    url += canonical_query(query);
  }
  return make(bucket, method, std::move(url));
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Status bad_response(std::string_view what, const std::string& why) {
  return io_error(std::string(what) + ": a malformed S3 response: " + why);
}

std::optional<std::string> find_header(const HttpResponse& response, std::string_view lower_name) {
  for (const auto& [name, value] : response.headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

// The first element's text, unescaped; std::nullopt when there is none.
Result<std::optional<std::string>> first_text(std::string_view xml, std::string_view tag, std::string_view what) {
  CHUTE_ASSIGN_OR_RETURN(std::vector<std::string_view> found, xml_elements(xml, tag, what));
  if (found.empty()) return std::optional<std::string>();
  CHUTE_ASSIGN_OR_RETURN(std::string text, xml_unescape(found.front(), what));
  return std::optional<std::string>(std::move(text));
}

Result<uint64_t> parse_size(std::string_view text, std::string_view what) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) return bad_response(what, "a size '" + std::string(text) + "'");
  return v;
}

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

HttpRequest s3_get_object(const S3Bucket& bucket, std::string_view key, uint64_t offset, uint64_t length) {
  HttpRequest r = object_request(bucket, "GET", key, {});
  r.offset = offset;
  r.length = length;
  return r;
}

HttpRequest s3_head_object(const S3Bucket& bucket, std::string_view key) {
  return object_request(bucket, "HEAD", key, {});
}

HttpRequest s3_list_objects_v2(const S3Bucket& bucket, std::string_view prefix, std::string_view continuation_token,
                               int max_keys, std::string_view delimiter) {
  Query query{{"list-type", "2"}};
  if (!prefix.empty()) query.emplace_back("prefix", std::string(prefix));
  if (!delimiter.empty()) query.emplace_back("delimiter", std::string(delimiter));
  if (!continuation_token.empty()) query.emplace_back("continuation-token", std::string(continuation_token));
  if (max_keys > 0) query.emplace_back("max-keys", std::to_string(max_keys));
  // The bucket itself: "/" on a virtual-hosted base, "/bucket" on a path-style one.
  const size_t host = bucket.base_url.find("://");
  const bool has_path = host != std::string::npos && bucket.base_url.find('/', host + 3) != std::string::npos;
  return make(bucket, "GET", bucket.base_url + (has_path ? "?" : "/?") + canonical_query(std::move(query)));
}

HttpRequest s3_put_object(const S3Bucket& bucket, std::string_view key, std::vector<uint8_t> body) {
  HttpRequest r = object_request(bucket, "PUT", key, {});
  r.headers.push_back("Content-Type: application/octet-stream");
  r.body = std::move(body);
  return r;
}

HttpRequest s3_create_multipart_upload(const S3Bucket& bucket, std::string_view key) {
  HttpRequest r = object_request(bucket, "POST", key, {{"uploads", ""}});
  r.headers.push_back("Content-Type: application/octet-stream");  // the object's type, not the request's
  return r;
}

HttpRequest s3_upload_part(const S3Bucket& bucket, std::string_view key, std::string_view upload_id, int part_number,
                           std::vector<uint8_t> body) {
  HttpRequest r = object_request(bucket, "PUT", key,
                                 {{"partNumber", std::to_string(part_number)}, {"uploadId", std::string(upload_id)}});
  r.headers.push_back("Content-Type: application/octet-stream");
  r.body = std::move(body);
  return r;
}

HttpRequest s3_complete_multipart_upload(const S3Bucket& bucket, std::string_view key, std::string_view upload_id,
                                         const std::vector<CompletedPart>& parts) {
  HttpRequest r = object_request(bucket, "POST", key, {{"uploadId", std::string(upload_id)}});
  std::string xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (const CompletedPart& p : parts) {
    xml +=
        "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" + xml_escape(p.etag) + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  r.headers.push_back("Content-Type: application/xml");
  r.body.assign(xml.begin(), xml.end());
  return r;
}

HttpRequest s3_abort_multipart_upload(const S3Bucket& bucket, std::string_view key, std::string_view upload_id) {
  return object_request(bucket, "DELETE", key, {{"uploadId", std::string(upload_id)}});
}

Result<std::string> xml_unescape(std::string_view text, std::string_view what) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) {
      return bad_response(what, "an unterminated entity in '" + std::string(text) + "'");
    }
    const std::string_view name = text.substr(i + 1, semi - i - 1);
    if (name == "amp") {
      out += '&';
    } else if (name == "lt") {
      out += '<';
    } else if (name == "gt") {
      out += '>';
    } else if (name == "quot") {
      out += '"';
    } else if (name == "apos") {
      out += '\'';
    } else if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const std::string_view digits = name.substr(hex ? 2 : 1);
      uint32_t cp = 0;
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
      if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || cp == 0 || cp > 0x10FFFF ||
          (cp >= 0xD800 && cp <= 0xDFFF)) {
        return bad_response(what, "a bad character reference '&" + std::string(name) + ";'");
      }
      append_utf8(out, cp);
    } else {
      return bad_response(what, "an unknown entity '&" + std::string(name) + ";'");
    }
    i = semi;
  }
  return out;
}

Result<std::vector<std::string_view>> xml_elements(std::string_view xml, std::string_view tag, std::string_view what) {
  std::vector<std::string_view> out;
  std::string open("<"), close("</");  // appended, not "<" + tag: GCC 12 warns falsely (-Wrestrict) on that
  open += tag;
  close += tag;
  close += '>';
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t after = pos + open.size();
    if (after >= xml.size()) return bad_response(what, open + " is cut off (truncated)");
    const char next = xml[after];
    if (next != '>' && next != '/' && next != ' ') {  // another tag with this prefix (<KeyCount> for <Key>)
      pos = after;
      continue;
    }
    const size_t gt = xml.find('>', after);
    if (gt == std::string_view::npos) return bad_response(what, open + " is cut off (truncated)");
    if (xml[gt - 1] == '/') {  // <Tag/>: empty
      out.emplace_back();
      pos = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) {
      return bad_response(what, open + "> is never closed (truncated)");
    }
    out.push_back(xml.substr(gt + 1, end - gt - 1));
    pos = end + close.size();
  }
  return out;
}

Result<ListPage> parse_list_objects_v2(std::string_view xml, std::string_view what) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    if (auto error = parse_s3_error(xml))
      return io_error(std::string(what) + ": " + error->code + ": " + error->message);
    return bad_response(what, "no <ListBucketResult>");
  }
  if (xml.find("</ListBucketResult>") == std::string_view::npos) {
    return bad_response(what, "</ListBucketResult> missing (truncated)");
  }
  ListPage page;
  CHUTE_ASSIGN_OR_RETURN(std::vector<std::string_view> contents, xml_elements(xml, "Contents", what));
  for (std::string_view c : contents) {
    ListedObject o;
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> key, first_text(c, "Key", what));
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> size, first_text(c, "Size", what));
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> etag, first_text(c, "ETag", what));
    if (!key || !size) return bad_response(what, "a <Contents> without <Key> or <Size>");
    o.key = std::move(*key);
    CHUTE_ASSIGN_OR_RETURN(o.size, parse_size(*size, what));
    o.etag = unquote_etag(etag.value_or(""));
    page.objects.push_back(std::move(o));
  }
  // The page's own elements come after its <Contents>; search the rest so that a key cannot pose as one.
  std::string_view outside = xml;
  if (!contents.empty()) {
    const std::string_view last = contents.back();
    outside = xml.substr(static_cast<size_t>(last.data() + last.size() - xml.data()));
  }
  std::string_view head =
      contents.empty() ? xml : xml.substr(0, static_cast<size_t>(contents.front().data() - xml.data()));
  std::optional<std::string> truncated, token;
  for (std::string_view part : {head, outside}) {
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> t, first_text(part, "IsTruncated", what));
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> n, first_text(part, "NextContinuationToken", what));
    if (t) truncated = t;
    if (n) token = n;
  }
  if (truncated && *truncated != "true" && *truncated != "false") {
    return bad_response(what, "<IsTruncated> is '" + *truncated + "'");
  }
  page.truncated = truncated == "true";
  if (page.truncated) {
    if (!token || token->empty()) return bad_response(what, "<IsTruncated>true without <NextContinuationToken>");
    page.next_token = std::move(*token);
  }
  return page;
}

Result<std::string> parse_upload_id(std::string_view xml, std::string_view what) {
  if (auto error = parse_s3_error(xml)) return io_error(std::string(what) + ": " + error->code + ": " + error->message);
  CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> id, first_text(xml, "UploadId", what));
  if (!id || id->empty()) return bad_response(what, "no <UploadId>");
  return std::move(*id);
}

std::optional<S3Error> parse_s3_error(std::string_view xml) {
  auto errors = xml_elements(xml, "Error", "S3 error");
  if (!errors.is_ok() || errors->empty()) return std::nullopt;
  const std::string_view body = errors->front();
  S3Error e;
  auto code = first_text(body, "Code", "S3 error");
  auto message = first_text(body, "Message", "S3 error");
  if (code.is_ok() && code->has_value()) e.code = **code;
  if (message.is_ok() && message->has_value()) e.message = **message;
  if (e.code.empty() && e.message.empty()) return std::nullopt;
  return e;
}

Status check_complete_multipart(std::string_view xml, std::string_view what) {
  if (auto error = parse_s3_error(xml)) {
    const std::string m = std::string(what) + ": " + error->code + ": " + error->message;
    if (error->code == "InternalError" || error->code == "SlowDown" || error->code == "ServiceUnavailable") {
      return environment_error(m);
    }
    return io_error(m);
  }
  if (xml.find("<CompleteMultipartUploadResult") == std::string_view::npos ||
      xml.find("</CompleteMultipartUploadResult>") == std::string_view::npos) {
    return bad_response(what, "no complete <CompleteMultipartUploadResult>");
  }
  return Status::ok();
}

Result<HeadInfo> parse_head_object(const HttpResponse& response, std::string_view what) {
  HeadInfo info;
  const std::optional<std::string> range = find_header(response, "content-range");
  if (const size_t slash = range ? range->rfind('/') : std::string::npos; slash != std::string::npos) {
    // A ranged GET's answer: "bytes 0-0/<size>".
    CHUTE_ASSIGN_OR_RETURN(info.size, parse_size(std::string_view(*range).substr(slash + 1), what));
    info.etag = unquote_etag(find_header(response, "etag").value_or(""));
    return info;
  }
  const std::optional<std::string> length = find_header(response, "content-length");
  if (!length) return bad_response(what, "no Content-Length");
  CHUTE_ASSIGN_OR_RETURN(info.size, parse_size(*length, what));
  info.etag = unquote_etag(find_header(response, "etag").value_or(""));
  return info;
}

Result<std::string> parse_part_etag(const HttpResponse& response, std::string_view what) {
  std::optional<std::string> etag = find_header(response, "etag");
  if (!etag || etag->empty()) return bad_response(what, "UploadPart's response has no ETag");
  return std::move(*etag);
}

std::string unquote_etag(std::string_view etag) {
  const bool weak = etag.starts_with("W/");
  if (weak) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return (weak ? "W/" : "") + std::string(etag);
}

}  // namespace chute
