#include "chute/remote/credentials.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

extern char** environ;

namespace chute {

EnvMap process_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

FileReader disk_file_reader() {
  return [](const std::string& path) -> Result<std::optional<std::string>> {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::optional<std::string>();
      return io_error("cannot read '" + path + "': " + std::strerror(errno));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("cannot open '" + path + "'");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return io_error("cannot read '" + path + "'");
    return std::optional<std::string>(text.str());
  };
}

namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<std::string> lookup(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// The first of `names` that is set.
std::optional<std::string> first_set(const EnvMap& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = lookup(env, n)) return v;
  }
  return std::nullopt;
}

Result<std::string> check_endpoint(const std::string& endpoint, const std::string& where) {
  std::string e = trim(endpoint);
  while (!e.empty() && e.back() == '/') e.pop_back();
  const bool http = e.starts_with("http://") || e.starts_with("https://");
  if (!http || e.find("://") + 3 >= e.size()) {
    return invalid_argument("bad S3 endpoint '" + e + "' (from " + where + "): expected http(s)://host[:port]");
  }
  return e;
}

// A file's sections, or an empty file when it does not exist.
Result<IniFile> load_ini(const FileReader& read_file, const std::string& path) {
  CHUTE_ASSIGN_OR_RETURN(std::optional<std::string> text, read_file(path));
  if (!text) return IniFile{};
  return parse_ini(*text, path);
}

const std::map<std::string, std::string>* section(const IniFile& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

std::optional<std::string> value(const std::map<std::string, std::string>* s, const std::string& key) {
  if (s == nullptr) return std::nullopt;
  auto it = s->find(key);
  if (it == s->end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// botocore's rule for a container credentials URL given in full: https, or a host that can only be local
// or the container agent's (ECS 169.254.170.2, EKS Pod Identity 169.254.170.23 / fd00:ec2::23).
bool allowed_container_url(const std::string& url) {
  if (url.starts_with("https://")) return true;
  if (!url.starts_with("http://")) return false;
  std::string host = url.substr(7, url.find_first_of("/?#", 7) - 7);
  if (host.starts_with("[")) {
    host = host.substr(1, host.find(']') - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host.resize(colon);
  }
  return host == "localhost" || host == "::1" || host.starts_with("127.") || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "fd00:ec2::23";
}

// The sources of temporary credentials that the environment and the profile configure.
Result<CredentialSources> resolve_sources(const EnvMap& env, const std::map<std::string, std::string>* conf,
                                          const std::string& region) {
  CredentialSources s;
  const auto setting = [&](const char* env_name, const char* profile_key) -> std::optional<std::string> {
    if (auto v = lookup(env, env_name)) return trim(*v);
    return value(conf, profile_key);
  };
  s.web_identity_token_file = setting("AWS_WEB_IDENTITY_TOKEN_FILE", "web_identity_token_file").value_or("");
  s.role_arn = setting("AWS_ROLE_ARN", "role_arn").value_or("");
  s.role_session_name = setting("AWS_ROLE_SESSION_NAME", "role_session_name").value_or("");
  if (!s.web_identity_token_file.empty() && s.role_arn.empty()) {
    return invalid_argument("AWS_WEB_IDENTITY_TOKEN_FILE is set without AWS_ROLE_ARN (web identity needs both)");
  }
  if (s.web_identity_token_file.empty()) s.role_arn.clear();  // a profile's role_arn alone is AssumeRole's
  if (auto sts = first_set(env, {"AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"})) {
    CHUTE_ASSIGN_OR_RETURN(s.sts_endpoint, check_endpoint(*sts, "AWS_ENDPOINT_URL_STS or AWS_ENDPOINT_URL"));
  } else if (auto p = value(conf, "sts.endpoint_url")) {
    CHUTE_ASSIGN_OR_RETURN(s.sts_endpoint, check_endpoint(*p, "the profile's sts endpoint_url"));
  } else {
    s.sts_endpoint = "https://sts." + region + ".amazonaws.com";
  }
  if (auto relative = lookup(env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    s.container_url = "http://169.254.170.2" + *relative;
  } else if (auto full = lookup(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
    if (!allowed_container_url(*full)) {
      return invalid_argument("AWS_CONTAINER_CREDENTIALS_FULL_URI '" + redact_url(*full) +
                              "' is neither https nor a loopback, ECS or EKS Pod Identity address");
    }
    s.container_url = *full;
  }
  s.container_token_file = lookup(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("");
  s.container_token = lookup(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
  s.instance_metadata = lower(trim(lookup(env, "AWS_EC2_METADATA_DISABLED").value_or(""))) != "true";
  if (auto e = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint")) {
    CHUTE_ASSIGN_OR_RETURN(s.instance_metadata_endpoint, check_endpoint(*e, "AWS_EC2_METADATA_SERVICE_ENDPOINT"));
  } else if (auto mode = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ec2_metadata_service_endpoint_mode");
             mode && lower(*mode) == "ipv6") {
    s.instance_metadata_endpoint = "http://[fd00:ec2::254]";
  }
  if (auto t = setting("AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout")) {
    s.instance_metadata_timeout_s = std::strtod(t->c_str(), nullptr);
    if (!(s.instance_metadata_timeout_s > 0)) return invalid_argument("AWS_METADATA_SERVICE_TIMEOUT '" + *t + "'");
  }
  if (auto n = setting("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "metadata_service_num_attempts")) {
    s.instance_metadata_attempts = std::atoi(n->c_str());
    if (s.instance_metadata_attempts < 1) return invalid_argument("AWS_METADATA_SERVICE_NUM_ATTEMPTS '" + *n + "'");
  }
  return s;
}

bool dns_compatible(const std::string& bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;  // '.' breaks TLS
  }
  return bucket.front() != '-' && bucket.back() != '-';
}

}  // namespace

Result<IniFile> parse_ini(const std::string& text, const std::string& path) {
  IniFile ini;
  std::string current;
  bool in_section = false;
  std::string parent;  // a key with an empty value: indented lines below it are its nested settings
  std::istringstream lines(text);
  std::string raw;
  int number = 0;
  while (std::getline(lines, raw)) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const bool indented = std::isspace(static_cast<unsigned char>(raw[0])) != 0;
    if (line[0] == '[') {
      if (line.back() != ']') {
        return invalid_argument(path + ":" + std::to_string(number) + ": a section header without ']'");
      }
      current = trim(line.substr(1, line.size() - 2));
      in_section = true;
      parent.clear();
      ini[current];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return invalid_argument(path + ":" + std::to_string(number) + ": expected 'key = value' or '[section]'");
    }
    if (!in_section) {
      return invalid_argument(path + ":" + std::to_string(number) + ": a setting before any [section]");
    }
    const std::string key = lower(trim(line.substr(0, eq)));
    const std::string val = trim(line.substr(eq + 1));
    if (indented && !parent.empty()) {
      ini[current][parent + "." + key] = val;
      continue;
    }
    ini[current][key] = val;
    parent = val.empty() ? key : std::string();
  }
  return ini;
}

std::optional<SigV4> S3Config::sigv4() const {
  if (anonymous()) return std::nullopt;
  SigV4 s;
  s.access_key = access_key;
  s.secret_key = secret_key;
  s.session_token = session_token;
  s.region = region;
  s.service = service;
  return s;
}

std::string S3Config::to_string() const {
  std::string out = "endpoint=" + (endpoint.empty() ? std::string("AWS") : endpoint) + " region=" + region +
                    (force_path_style ? " path-style" : "");
  if (anonymous()) return out + " credentials=none (anonymous, unsigned requests)";
  return out + " credentials=" + access_key.substr(0, 4) + "... (" + source + ")" +
         (session_token.empty() ? "" : " with a session token");
}

Result<S3Config> resolve_s3_config(const EnvMap& env, const FileReader& read_file) {
  S3Config config;
  const std::optional<std::string> home = lookup(env, "HOME");
  const std::optional<std::string> named_profile = lookup(env, "AWS_PROFILE");
  const std::string profile = named_profile.value_or("default");
  const auto default_path = [&](const char* file) { return home ? *home + "/.aws/" + file : std::string(); };
  const std::string credentials_path = lookup(env, "AWS_SHARED_CREDENTIALS_FILE").value_or(default_path("credentials"));
  const std::string config_path = lookup(env, "AWS_CONFIG_FILE").value_or(default_path("config"));

  IniFile credentials_ini, config_ini;
  if (!credentials_path.empty()) {
    CHUTE_ASSIGN_OR_RETURN(credentials_ini, load_ini(read_file, credentials_path));
  }
  if (!config_path.empty()) {
    CHUTE_ASSIGN_OR_RETURN(config_ini, load_ini(read_file, config_path));
  }
  const auto* cred_section = section(credentials_ini, profile);
  const auto* conf_section = section(config_ini, "profile " + profile);
  if (conf_section == nullptr && profile == "default") conf_section = section(config_ini, "default");
  if (named_profile && cred_section == nullptr && conf_section == nullptr) {
    return invalid_argument("AWS_PROFILE='" + profile + "': no such profile in '" + credentials_path + "' or '" +
                            config_path + "'");
  }

  const std::optional<std::string> env_key = lookup(env, "AWS_ACCESS_KEY_ID");
  const std::optional<std::string> env_secret = lookup(env, "AWS_SECRET_ACCESS_KEY");
  if (env_key.has_value() != env_secret.has_value()) {
    return invalid_argument(std::string("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (only ") +
                            (env_key ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is set)");
  }
  if (auto r = first_set(env, {"AWS_REGION", "AWS_DEFAULT_REGION"})) {
    config.region = *r;
  } else if (auto pr = value(conf_section, "region")) {
    config.region = *pr;
  }
  CHUTE_ASSIGN_OR_RETURN(config.sources, resolve_sources(env, conf_section, config.region));
  if (env_key) {
    config.access_key = *env_key;
    config.secret_key = *env_secret;
    config.session_token = lookup(env, "AWS_SESSION_TOKEN").value_or("");
    config.source = "environment";
  } else if (config.sources.web_identity_token_file.empty()) {  // web identity comes before the profile's keys
    config.tried = "environment (AWS_ACCESS_KEY_ID unset), profile '" + profile + "' (no keys in " +
                   (credentials_path.empty() ? std::string("~/.aws/credentials") : credentials_path) + " or " +
                   (config_path.empty() ? std::string("~/.aws/config") : config_path) + ")";
    for (const auto& [s, path] : {std::pair{cred_section, credentials_path}, std::pair{conf_section, config_path}}) {
      const auto key = value(s, "aws_access_key_id");
      const auto secret = value(s, "aws_secret_access_key");
      if (!key && !secret) continue;
      if (!key || !secret) {
        return invalid_argument("profile '" + profile + "' in '" + path +
                                "' must set both aws_access_key_id and aws_secret_access_key");
      }
      config.access_key = *key;
      config.secret_key = *secret;
      config.session_token = value(s, "aws_session_token").value_or("");
      config.source = "profile '" + profile + "' in " + path;
      config.tried.clear();
      break;
    }
  } else {
    config.tried = "environment (AWS_ACCESS_KEY_ID unset)";
  }

  std::optional<std::string> endpoint;
  std::string endpoint_source;
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    if (auto v = lookup(env, name)) {
      endpoint = v;
      endpoint_source = name;
      break;
    }
  }
  if (!endpoint) {
    for (const char* key : {"s3.endpoint_url", "endpoint_url"}) {
      if (auto v = value(conf_section, key)) {
        endpoint = v;
        endpoint_source = "profile '" + profile + "' in " + config_path;
        break;
      }
    }
  }
  if (endpoint) {
    CHUTE_ASSIGN_OR_RETURN(config.endpoint, check_endpoint(*endpoint, endpoint_source));
    config.force_path_style = true;
  }
  if (auto style = value(conf_section, "s3.addressing_style")) {
    if (*style == "path") config.force_path_style = true;
    if (*style == "virtual") config.force_path_style = false;
  }
  return config;
}

Result<S3Config> resolve_gs_config(const EnvMap& env) {
  S3Config config;
  config.region = lookup(env, "CHUTE_GS_REGION").value_or("auto");
  CHUTE_ASSIGN_OR_RETURN(config.endpoint,
                         check_endpoint(lookup(env, "CHUTE_GS_ENDPOINT_URL").value_or("https://storage.googleapis.com"),
                                        "CHUTE_GS_ENDPOINT_URL"));
  config.force_path_style = true;
  const auto key = lookup(env, "CHUTE_GS_ACCESS_KEY_ID");
  const auto secret = lookup(env, "CHUTE_GS_SECRET_ACCESS_KEY");
  if (key.has_value() != secret.has_value()) {
    return invalid_argument("CHUTE_GS_ACCESS_KEY_ID and CHUTE_GS_SECRET_ACCESS_KEY must be set together");
  }
  if (key) {
    config.access_key = *key;
    config.secret_key = *secret;
    config.source = "environment (CHUTE_GS_*)";
  }
  return config;
}

std::string bucket_base_url(const S3Config& config, const std::string& bucket) {
  if (!config.endpoint.empty()) {
    if (config.force_path_style) return config.endpoint + "/" + bucket;
    const size_t host = config.endpoint.find("://") + 3;
    return config.endpoint.substr(0, host) + bucket + "." + config.endpoint.substr(host);
  }
  if (config.force_path_style || !dns_compatible(bucket)) {
    return "https://s3." + config.region + ".amazonaws.com/" + bucket;
  }
  return "https://" + bucket + ".s3." + config.region + ".amazonaws.com";
}

}  // namespace chute
