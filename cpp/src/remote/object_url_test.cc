#include "chute/remote/object_url.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace chute {
namespace {

TEST(ObjectUrlTest, ParsesEveryScheme) {
  auto s3 = parse_object_url("s3://my-bucket/a/b c/d.tar");
  ASSERT_TRUE(s3.is_ok());
  EXPECT_EQ(s3->scheme, UrlScheme::kS3);
  EXPECT_EQ(s3->bucket, "my-bucket");
  EXPECT_EQ(s3->key, "a/b c/d.tar");  // keys are literal, never percent-decoded
  EXPECT_TRUE(s3->remote());

  auto bucket_only = parse_object_url("gs://b");
  ASSERT_TRUE(bucket_only.is_ok());
  EXPECT_EQ(bucket_only->scheme, UrlScheme::kGs);
  EXPECT_EQ(bucket_only->key, "");

  auto https = parse_object_url("https://host:8443/data/x.tar?sig=1");
  ASSERT_TRUE(https.is_ok());
  EXPECT_EQ(https->scheme, UrlScheme::kHttps);
  EXPECT_EQ(https->path, "https://host:8443/data/x.tar?sig=1");

  auto file = parse_object_url("file:///data/a%20b.tar");
  ASSERT_TRUE(file.is_ok());
  EXPECT_EQ(file->scheme, UrlScheme::kFile);
  EXPECT_EQ(file->path, "/data/a b.tar");
  EXPECT_FALSE(file->remote());
  EXPECT_EQ(parse_object_url("file://localhost/x")->path, "/x");

  auto plain = parse_object_url("relative/dir/x.tar");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->scheme, UrlScheme::kFile);
  EXPECT_EQ(plain->path, "relative/dir/x.tar");
}

TEST(ObjectUrlTest, BadUrlsSayWhatIsWrong) {
  const auto message = [](const std::string& url) {
    auto r = parse_object_url(url);
    EXPECT_FALSE(r.is_ok()) << url;
    if (r.is_ok()) return std::string();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(url), std::string::npos) << r.status().message();
    return r.status().message();
  };
  EXPECT_NE(message("s3://").find("no bucket"), std::string::npos);
  EXPECT_NE(message("s3:///key").find("no bucket"), std::string::npos);
  EXPECT_NE(message("s3://bad?bucket/k").find("'?'"), std::string::npos);
  EXPECT_NE(message("ftp://host/x").find("unknown scheme 'ftp'"), std::string::npos);
  EXPECT_NE(message("https:///x").find("no host"), std::string::npos);
  EXPECT_NE(message("file://otherhost/x").find("another host"), std::string::npos);
  EXPECT_NE(message("file:///a%zz").find("hex digits"), std::string::npos);
  EXPECT_NE(message("file:///a%2").find("hex digits"), std::string::npos);
  EXPECT_FALSE(parse_object_url("").is_ok());
}

TEST(ObjectUrlTest, IsRemote) {
  EXPECT_TRUE(is_remote("s3://b/k"));
  EXPECT_TRUE(is_remote("gs://b/k"));
  EXPECT_TRUE(is_remote("http://h/x"));
  EXPECT_TRUE(is_remote("HTTPS://h/x"));
  EXPECT_FALSE(is_remote("file:///x"));
  EXPECT_FALSE(is_remote("/data/x"));
  EXPECT_FALSE(is_remote("s3://"));  // not a URL at all
}

TEST(ObjectUrlTest, JoinAddsOneSlash) {
  EXPECT_EQ(join_url("s3://b/prefix/", "index.chidx"), "s3://b/prefix/index.chidx");
  EXPECT_EQ(join_url("s3://b/prefix", "index.chidx"), "s3://b/prefix/index.chidx");
  EXPECT_EQ(join_url("/data", "/index.chidx"), "/data/index.chidx");
  EXPECT_EQ(join_url("https://h/d/?token=x", "i.chidx"), "https://h/d/i.chidx?token=x");
}

}  // namespace
}  // namespace chute
