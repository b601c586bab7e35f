#include "remote/credentials/credential_sources.h"

#include <time.h>

#include <cctype>
#include <cstdlib>
#include <ctime>

#include "chute/base/cancel.h"
#include "chute/remote/s3_protocol.h"

namespace chute::detail {
namespace {

constexpr int kMetadataTokenTtlS = 21600;  // botocore's: six hours

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string body_text(const HttpResponse& r) { return std::string(r.body.begin(), r.body.end()); }

// A JSON reader over one flat object.
class JsonReader {
 public:
  JsonReader(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Result<std::map<std::string, std::string>> object() {
    std::map<std::string, std::string> out;
    if (!take('{')) return bad("expected '{'");
    if (take('}')) return end(std::move(out));
    for (;;) {
      CHUTE_ASSIGN_OR_RETURN(std::string name, string());
      if (!take(':')) return bad("expected ':' after \"" + name + "\"");
      CHUTE_ASSIGN_OR_RETURN(std::string v, value());
      out[std::move(name)] = std::move(v);
      if (take('}')) return end(std::move(out));
      if (!take(',')) return bad("expected ',' or '}'");
    }
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool take(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  Status bad(const std::string& why) const {
    return io_error(what_ + ": not the JSON object expected (" + why + " at offset " + std::to_string(i_) + ")");
  }
  Result<std::map<std::string, std::string>> end(std::map<std::string, std::string> out) {
    skip_space();
    if (i_ != s_.size()) return bad("text after the object");
    return out;
  }
  Result<uint32_t> hex4() {
    if (i_ + 4 > s_.size()) return bad("a short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
        v |= static_cast<uint32_t>((c | 0x20) - 'a' + 10);
      } else {
        return bad("a bad \\u escape");
      }
    }
    return v;
  }
  Result<std::string> string() {
    if (!take('"')) return bad("expected a string");
    std::string out;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return bad("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          CHUTE_ASSIGN_OR_RETURN(uint32_t cp, hex4());
          if (cp >= 0xD800 && cp < 0xDC00 && i_ + 6 <= s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
            i_ += 2;
            CHUTE_ASSIGN_OR_RETURN(uint32_t low, hex4());
            if (low < 0xDC00 || low > 0xDFFF) return bad("a lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          return bad(std::string("a bad escape \\") + e);
      }
    }
    return bad("an unterminated string");
  }
  Result<std::string> value() {
    skip_space();
    if (i_ < s_.size() && s_[i_] == '"') return string();
    const size_t start = i_;
    while (i_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == '-' || s_[i_] == '+')) {
      ++i_;
    }
    if (i_ == start) return bad("expected a string, number, true, false or null (nested values are not read)");
    return std::string(s_.substr(start, i_ - start));
  }

  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

Result<std::string> required(const std::map<std::string, std::string>& m, const char* name, const std::string& what) {
  auto it = m.find(name);
  if (it == m.end() || it->second.empty()) return io_error(what + ": no " + name + " in the answer");
  return it->second;
}

Result<std::optional<std::chrono::system_clock::time_point>> expiration_of(const std::string& text,
                                                                           const std::string& what) {
  if (text.empty()) return std::optional<std::chrono::system_clock::time_point>();
  auto t = parse_iso8601(text);
  if (!t) return io_error(what + ": an Expiration that is not a time: '" + text + "'");
  return t;
}

// An error from fetching credentials, naming the source: the engine's message already names the request.
Status from(const std::string& source, const Status& st) { return Status(st.code(), source + ": " + st.message()); }

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text) {
  const std::string t = trim(text);
  std::tm tm{};
  const char* rest = ::strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return std::nullopt;
  if (*rest == '.') {  // fractional seconds: ignored
    ++rest;
    while (std::isdigit(static_cast<unsigned char>(*rest))) ++rest;
  }
  long offset_s = 0;
  if (*rest == 'Z' || *rest == 'z') {
    ++rest;
  } else if (*rest == '+' || *rest == '-') {
    const int sign = *rest == '-' ? -1 : 1;
    int hh = 0, mm = 0;
    if (std::sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2) return std::nullopt;
    offset_s = sign * (hh * 3600L + mm * 60L);
    rest += 6;
  } else {
    return std::nullopt;  // a local time says nothing about when
  }
  if (*rest != '\0') return std::nullopt;
  const time_t utc = ::timegm(&tm) - offset_s;
  return std::chrono::system_clock::from_time_t(utc);
}

Result<std::map<std::string, std::string>> parse_json_object(std::string_view json, const std::string& what) {
  return JsonReader(json, what).object();
}

Result<AwsCredentials> parse_credentials_json(std::string_view json, const std::string& what) {
  CHUTE_ASSIGN_OR_RETURN(auto m, parse_json_object(json, what));
  if (auto code = m.find("Code"); code != m.end() && code->second != "Success") {
    return io_error(what + ": the answer's Code is '" + code->second + "', not Success" +
                    (m.count("Message") ? " (" + m["Message"] + ")" : std::string()));
  }
  AwsCredentials c;
  CHUTE_ASSIGN_OR_RETURN(c.access_key, required(m, "AccessKeyId", what));
  CHUTE_ASSIGN_OR_RETURN(c.secret_key, required(m, "SecretAccessKey", what));
  c.session_token = m.count("Token") ? m["Token"] : std::string();
  CHUTE_ASSIGN_OR_RETURN(c.expiration, expiration_of(m.count("Expiration") ? m["Expiration"] : "", what));
  return c;
}

Result<AwsCredentials> parse_web_identity_response(std::string_view xml, const std::string& what) {
  CHUTE_ASSIGN_OR_RETURN(auto creds, xml_elements(xml, "Credentials", what));
  if (creds.size() != 1) return io_error(what + ": no <Credentials> in the answer");
  const auto field = [&](const char* tag) -> Result<std::string> {
    CHUTE_ASSIGN_OR_RETURN(auto found, xml_elements(creds[0], tag, what));
    if (found.empty()) return std::string();
    return xml_unescape(found[0], what);
  };
  AwsCredentials c;
  CHUTE_ASSIGN_OR_RETURN(c.access_key, field("AccessKeyId"));
  CHUTE_ASSIGN_OR_RETURN(c.secret_key, field("SecretAccessKey"));
  CHUTE_ASSIGN_OR_RETURN(c.session_token, field("SessionToken"));
  CHUTE_ASSIGN_OR_RETURN(std::string expiration, field("Expiration"));
  if (c.access_key.empty() || c.secret_key.empty()) return io_error(what + ": <Credentials> without its keys");
  CHUTE_ASSIGN_OR_RETURN(c.expiration, expiration_of(expiration, what));
  return c;
}

Result<AwsCredentials> fetch_web_identity(HttpEngine& engine, const CredentialSources& s, const FileReader& read_file) {
  const std::string source = "web identity (role " + s.role_arn + ")";
  CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> token, read_file(s.web_identity_token_file));
  if (!token || trim(*token).empty()) {
    return io_error(source + ": the token file '" + s.web_identity_token_file + "' (AWS_WEB_IDENTITY_TOKEN_FILE) " +
                    (token ? "is empty" : "does not exist"));
  }
  const std::string session =
      s.role_session_name.empty() ? "chute-session-" + std::to_string(std::time(nullptr)) : s.role_session_name;
  HttpRequest r;
  r.method = "POST";
  r.url = s.sts_endpoint + "/";
  r.headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8"};
  const std::string form = "Action=AssumeRoleWithWebIdentity&RoleArn=" + s3_uri_encode(s.role_arn, false) +
                           "&RoleSessionName=" + s3_uri_encode(session, false) +
                           "&Version=2011-06-15&WebIdentityToken=" + s3_uri_encode(trim(*token), false);
  r.body.assign(form.begin(), form.end());
  Result<HttpResponse> response = engine.fetch(std::move(r));
  if (!response.is_ok()) return from(source, response.status());
  const std::string xml = body_text(response.value());
  CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, parse_web_identity_response(xml, source));
  c.source = source;
  return c;
}

Result<AwsCredentials> fetch_container_credentials(HttpEngine& engine, const CredentialSources& s,
                                                   const FileReader& read_file) {
  const std::string source = "container credentials (" + redact_url(s.container_url) + ")";
  HttpRequest r;
  r.url = s.container_url;
  std::string token = s.container_token;
  if (!s.container_token_file.empty()) {
    CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> text, read_file(s.container_token_file));
    if (!text) {
      return io_error(source + ": the token file '" + s.container_token_file +
                      "' (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE) does not exist");
    }
    token = trim(*text);
  }
  if (!token.empty()) r.headers.push_back("Authorization: " + token);
  Result<HttpResponse> response = engine.fetch(std::move(r));
  if (!response.is_ok()) return from(source, response.status());
  CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, parse_credentials_json(body_text(response.value()), source));
  c.source = source;
  return c;
}

Result<std::optional<AwsCredentials>> fetch_instance_metadata(HttpEngine& engine, const CredentialSources& s,
                                                              std::string* why) {
  const auto request = [&](const std::string& method, const std::string& path, std::string header) {
    HttpRequest r;
    r.method = method;
    r.url = s.instance_metadata_endpoint + path;
    r.headers.push_back(std::move(header));
    r.timeout_s = s.instance_metadata_timeout_s;
    r.max_retries = s.instance_metadata_attempts - 1;
    return engine.fetch(std::move(r));
  };
  // An absent service, or one that refuses: not on EC2, or no role here. Cancellation is not absence.
  const auto absent = [&](const Status& st) -> Result<std::optional<AwsCredentials>> {
    if (st.code() == StatusCode::kCancelled) return st;
    *why = st.message();
    return std::optional<AwsCredentials>();
  };
  Result<HttpResponse> token = request("PUT", "/latest/api/token",
                                       "x-aws-ec2-metadata-token-ttl-seconds: " + std::to_string(kMetadataTokenTtlS));
  if (!token.is_ok()) return absent(token.status());
  const std::string auth = "x-aws-ec2-metadata-token: " + trim(body_text(token.value()));
  const std::string roles_path = "/latest/meta-data/iam/security-credentials/";
  Result<HttpResponse> roles = request("GET", roles_path, auth);
  if (!roles.is_ok()) {
    if (roles.status().code() == StatusCode::kNotFound) {
      *why = "no instance role attached";
      return std::optional<AwsCredentials>();
    }
    return absent(roles.status());
  }
  const std::string listed = body_text(roles.value());
  const std::string role = trim(std::string_view(listed).substr(0, listed.find('\n')));
  if (role.empty()) {
    *why = "no instance role attached";
    return std::optional<AwsCredentials>();
  }
  const std::string source = "instance metadata (role " + role + ")";
  Result<HttpResponse> creds = request("GET", roles_path + s3_uri_encode(role, false), auth);
  if (!creds.is_ok()) return from(source, creds.status());
  CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, parse_credentials_json(body_text(creds.value()), source));
  c.source = source;
  return std::optional<AwsCredentials>(std::move(c));
}

}  // namespace chute::detail
