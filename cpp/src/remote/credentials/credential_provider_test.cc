#include "chute/remote/credential_provider.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <future>
#include <thread>

#include "chute/base/cancel.h"
#include "remote/credentials/credential_sources.h"

namespace chute {
namespace {

using namespace std::chrono_literals;
using SysClock = std::chrono::system_clock;

FileReader no_files() {
  return [](const std::string&) -> Result<std::optional<std::string>> { return std::optional<std::string>(); };
}

Result<S3Config> config_of(const EnvMap& env) { return resolve_s3_config(env, no_files()); }

TEST(CredentialSourcesTest, ParsesInstanceMetadataAndContainerJson) {
  auto c = detail::parse_credentials_json(
      R"({
  "Code" : "Success",
  "LastUpdated" : "2026-12-04T20:00:00Z",
  "Type" : "AWS-HMAC",
  "AccessKeyId" : "ASIAEXAMPLE",
  "SecretAccessKey" : "se\/cr\u00e9t\"x",
  "Token" : "tok",
  "Expiration" : "2026-12-04T21:30:00Z"
})",
      "imds");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->access_key, "ASIAEXAMPLE");
  EXPECT_EQ(c->secret_key, "se/cr\xc3\xa9t\"x");
  EXPECT_EQ(c->session_token, "tok");
  ASSERT_TRUE(c->expiration.has_value());
  EXPECT_EQ(SysClock::to_time_t(*c->expiration), 1796419800);  // 2026-12-04T21:30:00Z
  // ECS's answer has no Code, and RoleArn beside the keys.
  auto ecs = detail::parse_credentials_json(
      R"({"RoleArn":"arn:aws:iam::1:role/r","AccessKeyId":"A","SecretAccessKey":"S","Token":"T",)"
      R"("Expiration":"2026-12-04T21:30:00.123+01:00"})",
      "ecs");
  ASSERT_TRUE(ecs.is_ok()) << ecs.status().to_string();
  EXPECT_EQ(SysClock::to_time_t(*ecs->expiration), 1796419800 - 3600);
  const auto failed =
      detail::parse_credentials_json(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})", "imds");
  ASSERT_FALSE(failed.is_ok());
  EXPECT_NE(failed.status().message().find("AssumeRoleUnauthorizedAccess"), std::string::npos);
  EXPECT_FALSE(detail::parse_credentials_json(R"({"AccessKeyId":"A"})", "imds").is_ok());  // no secret
  for (const char* bad : {"", "[]", "{\"a\":1", "{\"a\":{\"b\":1}}", "{\"a\":\"x\"} tail", "{\"a\":\"\\q\"}"}) {
    const auto r = detail::parse_json_object(bad, "x");
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) EXPECT_EQ(r.status().code(), StatusCode::kIoError) << bad;
  }
}

TEST(CredentialSourcesTest, ParsesAssumeRoleWithWebIdentity) {
  const char* xml = R"(<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:ns:sa</SubjectFromWebIdentityToken>
    <Credentials>
      <AccessKeyId>ASIAWEB</AccessKeyId>
      <SecretAccessKey>s&amp;cret</SecretAccessKey>
      <SessionToken>token</SessionToken>
      <Expiration>2026-12-04T21:30:00Z</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>)";
  auto c = detail::parse_web_identity_response(xml, "sts");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->access_key, "ASIAWEB");
  EXPECT_EQ(c->secret_key, "s&cret");
  EXPECT_EQ(c->session_token, "token");
  EXPECT_EQ(SysClock::to_time_t(*c->expiration), 1796419800);
  EXPECT_FALSE(detail::parse_web_identity_response("<ErrorResponse/>", "sts").is_ok());
  EXPECT_FALSE(detail::parse_iso8601("2026-12-04T21:30:00").has_value());  // no zone: no instant
  EXPECT_FALSE(detail::parse_iso8601("yesterday").has_value());
}

TEST(CredentialSourcesTest, ConfigurationNamesTheSourcesAsBotocoreReadsThem) {
  auto c = config_of({{"AWS_REGION", "eu-west-1"}});
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(c->anonymous());
  EXPECT_TRUE(c->sources.instance_metadata);
  EXPECT_EQ(c->sources.instance_metadata_endpoint, "http://169.254.169.254");
  EXPECT_EQ(c->sources.sts_endpoint, "https://sts.eu-west-1.amazonaws.com");
  EXPECT_NE(c->tried.find("environment"), std::string::npos);

  c = config_of({{"AWS_EC2_METADATA_DISABLED", "TRUE"},
                 {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9/"},
                 {"AWS_METADATA_SERVICE_TIMEOUT", "2.5"},
                 {"AWS_METADATA_SERVICE_NUM_ATTEMPTS", "3"}});
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(c->sources.instance_metadata);
  EXPECT_EQ(c->sources.instance_metadata_endpoint, "http://127.0.0.1:9");
  EXPECT_EQ(c->sources.instance_metadata_timeout_s, 2.5);
  EXPECT_EQ(c->sources.instance_metadata_attempts, 3);
  c = config_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv6"}});
  EXPECT_EQ(c->sources.instance_metadata_endpoint, "http://[fd00:ec2::254]");

  // Web identity comes before the profile's keys (botocore's order); STS's endpoint as botocore finds it.
  auto files = [](const std::string& path) -> Result<std::optional<std::string>> {
    if (path == "/h/.aws/credentials")
      return std::optional<std::string>("[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = s\n");
    return std::optional<std::string>();
  };
  auto w = resolve_s3_config({{"HOME", "/h"},
                              {"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"},
                              {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"},
                              {"AWS_ENDPOINT_URL_STS", "http://127.0.0.1:8/"}},
                             files);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_TRUE(w->anonymous());
  EXPECT_EQ(w->sources.web_identity_token_file, "/var/run/token");
  EXPECT_EQ(w->sources.role_arn, "arn:aws:iam::1:role/r");
  EXPECT_EQ(w->sources.sts_endpoint, "http://127.0.0.1:8");
  auto p = resolve_s3_config({{"HOME", "/h"}}, files);
  EXPECT_EQ(p->access_key, "FILEKEY");
  EXPECT_EQ(config_of({{"AWS_ENDPOINT_URL", "http://minio:9000"}})->sources.sts_endpoint, "http://minio:9000");

  // Half-set web identity, and a container URL botocore would refuse, are errors; ECS's relative URI works.
  EXPECT_FALSE(config_of({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}}).is_ok());
  const auto far = config_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.1/creds"}});
  ASSERT_FALSE(far.is_ok());
  EXPECT_NE(far.status().message().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos);
  EXPECT_TRUE(config_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:5/c"}}).is_ok());
  EXPECT_TRUE(config_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"}}).is_ok());
  EXPECT_EQ(config_of({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x"}})->sources.container_url,
            "http://169.254.170.2/v2/credentials/x");
}

TEST(CredentialProviderTest, RefreshesBeforeExpiryAtABoundedRate) {
  const SysClock::time_point now = SysClock::now();
  const SysClock::time_point long_ago = now - 1h;
  EXPECT_FALSE(credentials_refresh_due(std::nullopt, now, long_ago));  // fixed keys never expire
  EXPECT_FALSE(credentials_refresh_due(now + 6h, now, long_ago));      // far from expiry
  EXPECT_TRUE(credentials_refresh_due(now + 9min, now, long_ago));     // within 10 minutes
  EXPECT_FALSE(credentials_refresh_due(now + 9min, now, now - 10s));   // ... not again within 30 s
  EXPECT_TRUE(credentials_refresh_due(now + 9min, now, now - 31s));
  EXPECT_TRUE(credentials_refresh_due(now - 1s, now, now - 2s));  // expired: every second
  EXPECT_FALSE(credentials_refresh_due(now - 1s, now, now - 100ms));
}

TEST(CredentialProviderTest, FixedKeysAndNoSourceAtAll) {
  auto keys = config_of({{"AWS_ACCESS_KEY_ID", "AKIAFIXED"}, {"AWS_SECRET_ACCESS_KEY", "s"}});
  auto p = CredentialProvider::create(*keys, nullptr, no_files(), nullptr);
  auto c = p->current();
  ASSERT_TRUE(c.is_ok() && c->has_value());
  EXPECT_EQ((*c)->access_key, "AKIAFIXED");
  EXPECT_EQ((*c)->source, "environment");
  // Without an engine there is nothing to ask: anonymous, and tried() says what the configuration held.
  auto none = config_of({{"AWS_EC2_METADATA_DISABLED", "true"}});
  auto q = CredentialProvider::create(*none, nullptr, no_files(), nullptr);
  ASSERT_TRUE(q->current().is_ok());
  EXPECT_FALSE(q->current()->has_value());
  EXPECT_NE(q->tried().find("AWS_ACCESS_KEY_ID unset"), std::string::npos) << q->tried();
}

// What the feeder does: wait on the feed's descriptor, then take the ask.
bool wait_wanted(CredentialFeed& feed, std::chrono::milliseconds timeout) {
  pollfd p{.fd = feed.wait_fd(), .events = POLLIN, .revents = 0};
  ::poll(&p, 1, static_cast<int>(timeout.count()));
  return feed.take_wanted();
}

TEST(CredentialProviderTest, AFeedIsAskedThenAnswers) {
  auto feed = *CredentialFeed::create();
  auto p = CredentialProvider::create(*config_of({}), nullptr, no_files(), feed);
  EXPECT_FALSE(wait_wanted(*feed, 10ms));  // nobody asked yet: a job that signs nothing never resolves
  auto asked = std::async(std::launch::async, [&] { return p->current(); });
  ASSERT_TRUE(wait_wanted(*feed, 10s));
  feed->push(AwsCredentials{"ASIAFEED", "s", "t", std::nullopt, "botocore (sso)"});
  auto c = asked.get();
  ASSERT_TRUE(c.is_ok() && c->has_value()) << c.status().to_string();
  EXPECT_EQ((*c)->access_key, "ASIAFEED");
  feed->push(AwsCredentials{"ASIAFEED2", "s", "t", std::nullopt, "botocore (sso)"});  // botocore refreshed
  EXPECT_EQ((*p->current())->access_key, "ASIAFEED2");
  // An error fails the requests that need credentials, and asks again.
  feed->push_error("SSO token expired");
  auto e = p->current();
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("SSO token expired"), std::string::npos);
  EXPECT_TRUE(wait_wanted(*feed, 0ms));
  feed->push_none("nothing configured");
  EXPECT_FALSE(p->current()->has_value());
  EXPECT_NE(p->tried().find("nothing configured"), std::string::npos);
  p.reset();  // the provider gone, the feeder stops
  EXPECT_TRUE(feed->closed());
  pollfd woken{.fd = feed->wait_fd(), .events = POLLIN, .revents = 0};
  EXPECT_EQ(::poll(&woken, 1, 10000), 1);  // at once
  EXPECT_FALSE(feed->take_wanted());
}

TEST(CredentialProviderTest, AWaitForTheFeedIsCancellable) {
  auto feed = *CredentialFeed::create();
  auto p = CredentialProvider::create(*config_of({}), nullptr, no_files(), feed);
  auto token = CancelToken::make();
  auto asked = std::async(std::launch::async, [&] {
    CancelScope scope(token);
    return p->current();
  });
  ASSERT_TRUE(wait_wanted(*feed, 10s));
  token->cancel();
  const auto c = asked.get();
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace chute
