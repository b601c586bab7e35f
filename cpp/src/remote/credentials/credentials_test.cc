#include "chute/remote/credentials.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace chute {
namespace {

// Files that exist only in the test.
struct FakeFiles {
  std::map<std::string, std::string> files;
  std::string unreadable;
  FileReader reader() const {
    return [this](const std::string& path) -> Result<std::optional<std::string>> {
      if (path == unreadable) return io_error("cannot read '" + path + "'");
      auto it = files.find(path);
      if (it == files.end()) return std::optional<std::string>();
      return std::optional<std::string>(it->second);
    };
  }
};

S3Config resolve(const EnvMap& env, const FakeFiles& files) {
  auto r = resolve_s3_config(env, files.reader());
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : S3Config{};
}

std::string resolve_error(const EnvMap& env, const FakeFiles& files) {
  auto r = resolve_s3_config(env, files.reader());
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? "" : r.status().message();
}

TEST(CredentialsTest, AnonymousWhenNothingIsSet) {
  const S3Config c = resolve({{"HOME", "/home/u"}}, {});
  EXPECT_TRUE(c.anonymous());
  EXPECT_FALSE(c.sigv4().has_value());
  EXPECT_EQ(c.region, "us-east-1");
  EXPECT_EQ(c.endpoint, "");
  EXPECT_NE(c.to_string().find("anonymous"), std::string::npos);
  EXPECT_TRUE(resolve({}, {}).anonymous());  // no HOME: no files to read
}

TEST(CredentialsTest, EnvironmentWinsOverProfiles) {
  FakeFiles files;
  files.files["/home/u/.aws/credentials"] =
      "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n";
  const S3Config c = resolve({{"HOME", "/home/u"},
                              {"AWS_ACCESS_KEY_ID", "AKIAENVKEY"},
                              {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                              {"AWS_SESSION_TOKEN", "envtoken"}},
                             files);
  EXPECT_EQ(c.access_key, "AKIAENVKEY");
  EXPECT_EQ(c.secret_key, "envsecret");
  EXPECT_EQ(c.session_token, "envtoken");
  EXPECT_EQ(c.source, "environment");
  ASSERT_TRUE(c.sigv4().has_value());
  EXPECT_EQ(c.sigv4()->session_token, "envtoken");
  EXPECT_EQ(c.sigv4()->region, "us-east-1");
  EXPECT_EQ(c.sigv4()->service, "s3");
}

TEST(CredentialsTest, ToStringNeverPrintsTheSecret) {
  S3Config c;
  c.access_key = "AKIAEXAMPLEKEY";
  c.secret_key = "wJalrXUtnFEMI/K7MDENG";
  c.session_token = "FQoGZXIvYXdzEJr";
  c.source = "environment";
  const std::string s = c.to_string();
  EXPECT_EQ(s.find("wJalr"), std::string::npos) << s;
  EXPECT_EQ(s.find("FQoG"), std::string::npos) << s;
  EXPECT_EQ(s.find("EXAMPLEKEY"), std::string::npos) << s;  // only the key's first characters
  EXPECT_NE(s.find("AKIA..."), std::string::npos) << s;
  EXPECT_NE(s.find("session token"), std::string::npos) << s;
}

TEST(CredentialsTest, ProfilesWithCommentsFromBothFiles) {
  FakeFiles files;
  files.files["/creds"] =
      "# a comment\n"
      "; another\n"
      "[default]\n"
      "aws_access_key_id=DEFAULTKEY\n"
      "aws_secret_access_key=defaultsecret\n"
      "\n"
      "[work]\r\n"
      "  aws_access_key_id = WORKKEY  \r\n"
      "aws_secret_access_key = work/secret+x==\r\n"
      "aws_session_token = tok\n";
  files.files["/conf"] =
      "[default]\n"
      "region = eu-west-1\n"
      "[profile work]\n"
      "region = ap-south-1\n"
      "s3 =\n"
      "  endpoint_url = http://minio.local:9000/\n"
      "  addressing_style = path\n";
  const EnvMap base{{"AWS_SHARED_CREDENTIALS_FILE", "/creds"}, {"AWS_CONFIG_FILE", "/conf"}};
  const S3Config d = resolve(base, files);
  EXPECT_EQ(d.access_key, "DEFAULTKEY");
  EXPECT_EQ(d.region, "eu-west-1");
  EXPECT_EQ(d.endpoint, "");
  EXPECT_EQ(d.source, "profile 'default' in /creds");

  EnvMap env = base;
  env["AWS_PROFILE"] = "work";
  const S3Config w = resolve(env, files);
  EXPECT_EQ(w.access_key, "WORKKEY");
  EXPECT_EQ(w.secret_key, "work/secret+x==");
  EXPECT_EQ(w.session_token, "tok");
  EXPECT_EQ(w.region, "ap-south-1");
  EXPECT_EQ(w.endpoint, "http://minio.local:9000");  // the trailing '/' dropped
  EXPECT_TRUE(w.force_path_style);

  env["AWS_REGION"] = "us-west-2";
  env["AWS_DEFAULT_REGION"] = "ignored";
  EXPECT_EQ(resolve(env, files).region, "us-west-2");
  env.erase("AWS_REGION");
  EXPECT_EQ(resolve(env, files).region, "ignored");
}

TEST(CredentialsTest, CredentialsInTheConfigFile) {
  FakeFiles files;
  files.files["/home/u/.aws/config"] =
      "[profile p]\naws_access_key_id = CONFKEY\naws_secret_access_key = confsecret\nendpoint_url = "
      "https://s3.example.com\n";
  const S3Config c = resolve({{"HOME", "/home/u"}, {"AWS_PROFILE", "p"}}, files);
  EXPECT_EQ(c.access_key, "CONFKEY");
  EXPECT_EQ(c.source, "profile 'p' in /home/u/.aws/config");
  EXPECT_EQ(c.endpoint, "https://s3.example.com");
}

TEST(CredentialsTest, EndpointFromTheEnvironment) {
  FakeFiles files;
  files.files["/home/u/.aws/config"] = "[default]\nendpoint_url = https://from-profile\n";
  EnvMap env{{"HOME", "/home/u"}, {"AWS_ENDPOINT_URL", "http://127.0.0.1:5000"}};
  S3Config c = resolve(env, files);
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:5000");
  EXPECT_TRUE(c.force_path_style);
  env["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:6000";
  EXPECT_EQ(resolve(env, files).endpoint, "http://127.0.0.1:6000");
  env.clear();
  env["HOME"] = "/home/u";
  EXPECT_EQ(resolve(env, files).endpoint, "https://from-profile");
}

TEST(CredentialsTest, ErrorsNameTheProblem) {
  FakeFiles files;
  EXPECT_NE(resolve_error({{"AWS_ACCESS_KEY_ID", "K"}}, files).find("must be set together"), std::string::npos);
  EXPECT_NE(resolve_error({{"HOME", "/h"}, {"AWS_PROFILE", "nope"}}, files).find("no such profile"), std::string::npos);
  files.files["/c"] = "[default]\naws_access_key_id = K\n";
  EXPECT_NE(resolve_error({{"AWS_SHARED_CREDENTIALS_FILE", "/c"}}, files).find("must set both"), std::string::npos);
  files.files["/bad"] = "[default\n";
  EXPECT_NE(resolve_error({{"AWS_SHARED_CREDENTIALS_FILE", "/bad"}}, files).find("/bad:1"), std::string::npos);
  files.files["/orphan"] = "key = v\n";
  EXPECT_NE(resolve_error({{"AWS_CONFIG_FILE", "/orphan"}}, files).find("before any [section]"), std::string::npos);
  EXPECT_NE(resolve_error({{"AWS_ENDPOINT_URL", "minio:9000"}}, files).find("bad S3 endpoint 'minio:9000'"),
            std::string::npos);
  files.unreadable = "/locked";
  EXPECT_NE(resolve_error({{"AWS_CONFIG_FILE", "/locked"}}, files).find("cannot read '/locked'"), std::string::npos);
  // A secret never appears in an error.
  const std::string half = resolve_error({{"AWS_SECRET_ACCESS_KEY", "topsecret"}}, files);
  EXPECT_EQ(half.find("topsecret"), std::string::npos);
}

TEST(CredentialsTest, InlineHashIsPartOfTheValueAsInBotocore) {
  auto ini = parse_ini("[a]\nk = v # not a comment\n", "/f");
  ASSERT_TRUE(ini.is_ok());
  EXPECT_EQ(ini.value()["a"]["k"], "v # not a comment");
}

TEST(CredentialsTest, BucketUrls) {
  S3Config aws;
  aws.region = "eu-central-1";
  EXPECT_EQ(bucket_base_url(aws, "my-bucket"), "https://my-bucket.s3.eu-central-1.amazonaws.com");
  EXPECT_EQ(bucket_base_url(aws, "my.dotted.bucket"), "https://s3.eu-central-1.amazonaws.com/my.dotted.bucket");
  aws.force_path_style = true;
  EXPECT_EQ(bucket_base_url(aws, "my-bucket"), "https://s3.eu-central-1.amazonaws.com/my-bucket");
  S3Config minio;
  minio.endpoint = "http://127.0.0.1:9000";
  minio.force_path_style = true;
  EXPECT_EQ(bucket_base_url(minio, "b"), "http://127.0.0.1:9000/b");
  minio.force_path_style = false;
  EXPECT_EQ(bucket_base_url(minio, "b"), "http://b.127.0.0.1:9000");
}

TEST(CredentialsTest, GoogleCloudStorageHasItsOwnKeys) {
  auto anon = resolve_gs_config({{"AWS_ACCESS_KEY_ID", "AWSKEY"}, {"AWS_SECRET_ACCESS_KEY", "s"}});
  ASSERT_TRUE(anon.is_ok());
  EXPECT_TRUE(anon->anonymous());  // AWS keys are never sent to Google
  EXPECT_EQ(anon->endpoint, "https://storage.googleapis.com");
  EXPECT_EQ(anon->region, "auto");
  EXPECT_EQ(bucket_base_url(anon.value(), "b"), "https://storage.googleapis.com/b");
  auto signed_gs = resolve_gs_config({{"CHUTE_GS_ACCESS_KEY_ID", "GOOG1"}, {"CHUTE_GS_SECRET_ACCESS_KEY", "gsecret"}});
  ASSERT_TRUE(signed_gs.is_ok());
  EXPECT_EQ(signed_gs->access_key, "GOOG1");
  EXPECT_EQ(signed_gs->sigv4()->region, "auto");
  EXPECT_FALSE(resolve_gs_config({{"CHUTE_GS_ACCESS_KEY_ID", "GOOG1"}}).is_ok());
}

}  // namespace
}  // namespace chute
