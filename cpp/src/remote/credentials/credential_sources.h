// The sources of temporary AWS credentials, one request sequence each (credential_provider.h says when
// they are asked), and the parsers of their answers, pure so that tests pin them without a server.
// Thread-safety: plain functions; the engine is thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "chute/base/status.h"
#include "chute/remote/credential_provider.h"
#include "chute/remote/credentials.h"
#include "chute/remote/http_engine.h"

namespace chute::detail {

// AssumeRoleWithWebIdentity at sources.sts_endpoint with the token file's current content (unsigned; the
// token is the proof). An error names the role and STS's answer.
Result<AwsCredentials> fetch_web_identity(HttpEngine& engine, const CredentialSources& sources,
                                          const FileReader& read_file);
// A GET of sources.container_url with its Authorization token (the token file is read each time: it
// rotates).
Result<AwsCredentials> fetch_container_credentials(HttpEngine& engine, const CredentialSources& sources,
                                                   const FileReader& read_file);
// IMDSv2: session token, role, credentials. std::nullopt (with `why`) when the service does not answer
// within its timeout and attempts, or when no role is attached: the job is not on EC2, or has no role.
Result<std::optional<AwsCredentials>> fetch_instance_metadata(HttpEngine& engine, const CredentialSources& sources,
                                                              std::string* why);

// A flat JSON object (string, number, true/false/null values) as name -> text (strings unescaped, UTF-8).
// kIoError naming `what` for anything else.
Result<std::map<std::string, std::string>> parse_json_object(std::string_view json, const std::string& what);
// The credentials of instance metadata's and the container endpoint's JSON: AccessKeyId, SecretAccessKey,
// Token, Expiration (and Code, which must be "Success" when present).
Result<AwsCredentials> parse_credentials_json(std::string_view json, const std::string& what);
// The <Credentials> of an AssumeRoleWithWebIdentity response.
Result<AwsCredentials> parse_web_identity_response(std::string_view xml, const std::string& what);
// "2026-12-04T21:00:00Z" (fractional seconds and a "+hh:mm" offset allowed); nullopt when malformed.
std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text);

}  // namespace chute::detail
