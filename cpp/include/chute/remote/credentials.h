// Where an S3 request goes and how it is signed: credentials, region and endpoint, found as the AWS CLI
// finds them, and the bucket's base URL (path-style or virtual-hosted).
//
// s3:// (first match wins):
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else web identity when
//                configured (below: fetched later, by credential_provider.h); else the profile's keys
//                (AWS_PROFILE, default "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials,
//                section [name]), then in AWS_CONFIG_FILE (~/.aws/config, section [profile name], or
//                [default]); else the temporary credentials of `sources` (web identity, container, instance
//                metadata), fetched at the first signed request; else none: requests go unsigned
//                (anonymous; public buckets only).
//   sources      web identity (EKS IRSA): AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME),
//                or the profile's web_identity_token_file + role_arn, exchanged at STS (AWS_ENDPOINT_URL_STS,
//                AWS_ENDPOINT_URL, the profile's `sts =` endpoint_url, else https://sts.<region>.amazonaws.com);
//                container (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
//                AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN; instance metadata (IMDSv2): unless
//                AWS_EC2_METADATA_DISABLED=true, at AWS_EC2_METADATA_SERVICE_ENDPOINT (or the profile's
//                ec2_metadata_service_endpoint; _MODE IPv6: http://[fd00:ec2::254]; else
//                http://169.254.169.254), AWS_METADATA_SERVICE_TIMEOUT (1 s) and _NUM_ATTEMPTS (1), as botocore.
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else us-east-1.
//   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `s3 =` subsection `endpoint_url`, the
//                profile's `endpoint_url`; else AWS (https://bucket.s3.<region>.amazonaws.com).
//   addressing   path-style (<endpoint>/bucket/key) when an endpoint is set (MinIO, moto, Ceph), or the
//                profile's s3 `addressing_style = path`, or a bucket name that is not a DNS label (dots,
//                capitals, '_'); virtual-hosted otherwise.
// gs:// (Google Cloud Storage through its S3 interoperability API, HMAC keys): CHUTE_GS_ACCESS_KEY_ID +
//   CHUTE_GS_SECRET_ACCESS_KEY, endpoint CHUTE_GS_ENDPOINT_URL (default https://storage.googleapis.com,
//   path-style), region CHUTE_GS_REGION (default "auto"); anonymous when the keys are unset. AWS keys are
//   never sent to Google: they are different accounts.
// A profile named explicitly (AWS_PROFILE) that neither file has is an error, as in the AWS CLI; a missing
// default profile or missing files are not. Setting only one of a key pair is an error.
//
// The functions take the environment and a file reader, so that tests never touch the real ones.
// Thread-safety: plain functions on values.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "chute/base/status.h"
#include "chute/remote/http_engine.h"

namespace chute {

using EnvMap = std::map<std::string, std::string>;
// The file's text, std::nullopt when it does not exist; an error when it exists but cannot be read.
using FileReader = std::function<Result<std::optional<std::string>>(const std::string& path)>;

EnvMap process_environment();   // the process's environment, read once
FileReader disk_file_reader();  // reads files from disk

// The sources of temporary credentials that are configured (see above); empty strings: not configured.
struct CredentialSources {
  std::string web_identity_token_file, role_arn, role_session_name, sts_endpoint;
  std::string container_url, container_token, container_token_file;
  bool instance_metadata = true;                                      // false: AWS_EC2_METADATA_DISABLED=true
  std::string instance_metadata_endpoint = "http://169.254.169.254";  // no trailing '/'
  double instance_metadata_timeout_s = 1;
  int instance_metadata_attempts = 1;
};

struct S3Config {
  std::string access_key, secret_key, session_token;  // empty access_key: anonymous (unsigned requests)
  std::string region = "us-east-1";
  std::string endpoint;           // "scheme://host[:port]" without a trailing '/'; empty: AWS
  bool force_path_style = false;  // an endpoint, or addressing_style = path
  std::string service = "s3";     // the SigV4 service name
  std::string source;             // where the credentials came from, for messages ("environment", ...)
  // Without keys: where temporary ones may come from, and what was looked at before them (for a 403's
  // message: "environment (AWS_ACCESS_KEY_ID unset), profile 'default' (no keys in ~/.aws/credentials, ...)").
  CredentialSources sources;
  std::string tried;

  bool anonymous() const { return access_key.empty(); }
  std::optional<SigV4> sigv4() const;  // std::nullopt when anonymous
  // "s3 endpoint=http://127.0.0.1:5000 region=us-east-1 path-style credentials=AKIA... (environment)":
  // the access key's first 4 characters at most; never the secret or the session token.
  std::string to_string() const;
};

// The configuration for s3:// URLs (see above). kInvalidArgument for a half-set key pair, an explicitly
// named profile that does not exist, an endpoint that is not http(s)://host, a half-set web identity (a
// token file without a role, or the reverse), or a container URL that is neither loopback, ECS's or EKS's
// address nor https (botocore refuses those too).
Result<S3Config> resolve_s3_config(const EnvMap& env, const FileReader& read_file);
// The configuration for gs:// URLs (see above).
Result<S3Config> resolve_gs_config(const EnvMap& env);

// The base URL of `bucket` (no trailing '/'): object URLs are base + "/" + encoded key.
std::string bucket_base_url(const S3Config& config, const std::string& bucket);

// An AWS-style INI file: "section" -> "key" -> value. Lines starting with '#' or ';' are comments (a '#'
// after a value is part of it, as in botocore); an indented line under a key with an empty value is a
// nested setting, stored as "parent.key" ("s3.endpoint_url"). Keys are lower-cased.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
Result<IniFile> parse_ini(const std::string& text, const std::string& path);

}  // namespace chute
