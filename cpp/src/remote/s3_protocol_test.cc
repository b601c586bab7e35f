#include "chute/remote/s3_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace chute {
namespace {

S3Bucket path_style() { return {"http://127.0.0.1:5000/bkt", std::nullopt}; }
S3Bucket virtual_hosted() {
  SigV4 sig;
  sig.access_key = "AKIA";
  sig.secret_key = "secret";
  return {"https://bkt.s3.us-east-1.amazonaws.com", sig};
}

std::string body_text(const HttpRequest& r) { return std::string(r.body.begin(), r.body.end()); }

TEST(S3ProtocolTest, KeysAreEncodedCanonically) {
  EXPECT_EQ(s3_uri_encode("a/b c+d%e~f_g.h-i", true), "a/b%20c%2Bd%25e~f_g.h-i");
  EXPECT_EQ(s3_uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(s3_uri_encode("\xc3\xa9=&?#*", true), "%C3%A9%3D%26%3F%23%2A");
  EXPECT_EQ(s3_object_url(path_style(), "dir/x y.tar"), "http://127.0.0.1:5000/bkt/dir/x%20y.tar");
}

TEST(S3ProtocolTest, ObjectRequests) {
  const HttpRequest get = s3_get_object(virtual_hosted(), "k.tar", 100, 50);
  EXPECT_EQ(get.method, "GET");
  EXPECT_EQ(get.url, "https://bkt.s3.us-east-1.amazonaws.com/k.tar");
  EXPECT_EQ(get.offset, 100u);
  EXPECT_EQ(get.length, 50u);
  ASSERT_TRUE(get.sigv4.has_value());
  EXPECT_EQ(get.sigv4->access_key, "AKIA");
  EXPECT_FALSE(s3_head_object(path_style(), "k").sigv4.has_value());  // anonymous: unsigned
  EXPECT_EQ(s3_head_object(path_style(), "k").method, "HEAD");

  const HttpRequest put = s3_put_object(path_style(), "k", {1, 2, 3});
  EXPECT_EQ(put.method, "PUT");
  EXPECT_EQ(put.body, (std::vector<uint8_t>{1, 2, 3}));
}

TEST(S3ProtocolTest, ListQueryIsSortedAndEncoded) {
  EXPECT_EQ(s3_list_objects_v2(path_style(), "", "").url, "http://127.0.0.1:5000/bkt?list-type=2");
  EXPECT_EQ(s3_list_objects_v2(virtual_hosted(), "a b/", "tok/=+", 10).url,
            "https://bkt.s3.us-east-1.amazonaws.com/"
            "?continuation-token=tok%2F%3D%2B&list-type=2&max-keys=10&prefix=a%20b%2F");
  EXPECT_EQ(s3_list_objects_v2(path_style(), "d/x-", "", 0, "/").url,
            "http://127.0.0.1:5000/bkt?delimiter=%2F&list-type=2&prefix=d%2Fx-");
}

TEST(S3ProtocolTest, MultipartRequests) {
  const HttpRequest create = s3_create_multipart_upload(path_style(), "out/x.chute");
  EXPECT_EQ(create.method, "POST");
  EXPECT_EQ(create.url, "http://127.0.0.1:5000/bkt/out/x.chute?uploads=");
  const HttpRequest part = s3_upload_part(path_style(), "k", "id/+=", 3, {9});
  EXPECT_EQ(part.method, "PUT");
  EXPECT_EQ(part.url, "http://127.0.0.1:5000/bkt/k?partNumber=3&uploadId=id%2F%2B%3D");
  const HttpRequest complete = s3_complete_multipart_upload(path_style(), "k", "U", {{1, "\"e1\""}, {2, "\"e2\""}});
  EXPECT_EQ(complete.method, "POST");
  EXPECT_EQ(complete.url, "http://127.0.0.1:5000/bkt/k?uploadId=U");
  EXPECT_EQ(body_text(complete),
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag></Part></CompleteMultipartUpload>");
  const HttpRequest abort = s3_abort_multipart_upload(path_style(), "k", "U");
  EXPECT_EQ(abort.method, "DELETE");
  EXPECT_EQ(abort.url, "http://127.0.0.1:5000/bkt/k?uploadId=U");
}

TEST(S3ProtocolTest, XmlEntities) {
  EXPECT_EQ(xml_unescape("a&amp;b&lt;c&gt;d&quot;e&apos;f", "t").value(), "a&b<c>d\"e'f");
  EXPECT_EQ(xml_unescape("&#233;&#xE9;&#x1F600;", "t").value(), "\xc3\xa9\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_FALSE(xml_unescape("a&b", "t").is_ok());
  EXPECT_FALSE(xml_unescape("&nbsp;", "t").is_ok());
  EXPECT_FALSE(xml_unescape("&#xD800;", "t").is_ok());
  EXPECT_FALSE(xml_unescape("&#;", "t").is_ok());
  const Status bad = xml_unescape("&bogus;", "LIST s3://b/").status();
  EXPECT_EQ(bad.code(), StatusCode::kIoError);  // the server's failure, never corrupt data
  EXPECT_NE(bad.message().find("LIST s3://b/"), std::string::npos);
}

constexpr char kPage1[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>bkt</Name><Prefix>d/</Prefix>"
    "<KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>"
    "<Contents><Key>d/a&amp;b &lt;1&gt;.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
    "<ETag>&quot;0123abcd&quot;</ETag><Size>1048576</Size><StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>d/IsTruncated&lt;/Key&gt;</Key><ETag>\"ff\"</ETag><Size>0</Size></Contents>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
    "</ListBucketResult>";

TEST(S3ProtocolTest, ParsesAListPage) {
  auto page = parse_list_objects_v2(kPage1, "LIST s3://bkt/d/");
  ASSERT_TRUE(page.is_ok()) << page.status().to_string();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "d/a&b <1>.tar");
  EXPECT_EQ(page->objects[0].size, 1048576u);
  EXPECT_EQ(page->objects[0].etag, "0123abcd");
  EXPECT_EQ(page->objects[1].key, "d/IsTruncated</Key>");
  EXPECT_EQ(page->objects[1].size, 0u);
  EXPECT_EQ(page->objects[1].etag, "ff");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3ProtocolTest, TheLastPageAndAnEmptyOne) {
  auto last = parse_list_objects_v2(
      "<ListBucketResult><KeyCount>1</KeyCount><Contents><Key>z</Key><Size>5</Size></Contents>"
      "<IsTruncated>false</IsTruncated></ListBucketResult>",
      "t");
  ASSERT_TRUE(last.is_ok()) << last.status().to_string();
  EXPECT_FALSE(last->truncated);
  ASSERT_EQ(last->objects.size(), 1u);
  EXPECT_EQ(last->objects[0].etag, "");
  auto empty = parse_list_objects_v2(
      "<ListBucketResult><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated><NextContinuationToken/>"
      "</ListBucketResult>",
      "t");
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->objects.empty());
}

TEST(S3ProtocolTest, TruncatedOrMalformedListsAreErrors) {
  const auto message = [](std::string_view xml) {
    auto r = parse_list_objects_v2(xml, "LIST s3://bkt/");
    EXPECT_FALSE(r.is_ok()) << xml;
    if (r.is_ok()) return std::string();
    EXPECT_EQ(r.status().code(), StatusCode::kIoError);
    EXPECT_NE(r.status().message().find("LIST s3://bkt/"), std::string::npos);
    return r.status().message();
  };
  const std::string page(kPage1);
  EXPECT_NE(message(page.substr(0, page.size() - 30)).find("truncated"), std::string::npos);
  EXPECT_NE(message(page.substr(0, page.find("</Contents>"))).find("truncated"), std::string::npos);
  EXPECT_NE(message("<ListBucketResult><Contents><Key>k</Key><Size>x1</Size></Contents></ListBucketResult>")
                .find("size 'x1'"),
            std::string::npos);
  EXPECT_NE(message("<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>").find("without"),
            std::string::npos);
  EXPECT_NE(message("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
                .find("without <NextContinuationToken>"),
            std::string::npos);
  EXPECT_NE(message("<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>").find("maybe"),
            std::string::npos);
  EXPECT_NE(message("<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>").find("AccessDenied"),
            std::string::npos);
  EXPECT_NE(message("").find("no <ListBucketResult>"), std::string::npos);
}

TEST(S3ProtocolTest, UploadIdAndErrors) {
  EXPECT_EQ(parse_upload_id("<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
                            "<UploadId>VXBsb2Fk&amp;SUQ=</UploadId></InitiateMultipartUploadResult>",
                            "t")
                .value(),
            "VXBsb2Fk&SUQ=");
  EXPECT_FALSE(parse_upload_id("<InitiateMultipartUploadResult><UploadId>abc", "t").is_ok());
  EXPECT_FALSE(parse_upload_id("<InitiateMultipartUploadResult></InitiateMultipartUploadResult>", "t").is_ok());

  auto e = parse_s3_error(
      "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The key &quot;x&quot; does not exist</Message>"
      "<RequestId>1</RequestId></Error>");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "NoSuchKey");
  EXPECT_EQ(e->message, "The key \"x\" does not exist");
  EXPECT_FALSE(parse_s3_error("<ListBucketResult/>").has_value());
  EXPECT_FALSE(parse_s3_error("").has_value());
}

TEST(S3ProtocolTest, CompleteCanFailWithStatus200) {
  EXPECT_TRUE(check_complete_multipart("<CompleteMultipartUploadResult><Location>x</Location><ETag>\"e-2\"</ETag>"
                                       "</CompleteMultipartUploadResult>",
                                       "t")
                  .is_ok());
  const Status internal = check_complete_multipart(
      "<?xml version=\"1.0\"?>\n\n<Error><Code>InternalError</Code><Message>We encountered an internal error."
      "</Message></Error>",
      "COMPLETE s3://b/k");
  EXPECT_EQ(internal.code(), StatusCode::kEnvironment);
  EXPECT_NE(internal.message().find("COMPLETE s3://b/k: InternalError"), std::string::npos);
  const Status bad_part = check_complete_multipart("<Error><Code>InvalidPart</Code><Message>m</Message></Error>", "t");
  EXPECT_EQ(bad_part.code(), StatusCode::kIoError);
  EXPECT_FALSE(check_complete_multipart("<CompleteMultipartUploadResult><Loc", "t").is_ok());  // cut off
}

TEST(S3ProtocolTest, HeadAndPartResponses) {
  HttpResponse head;
  head.status = 200;
  head.headers = {{"content-length", "12345"}, {"etag", "\"abc\""}};
  auto info = parse_head_object(head, "HEAD s3://b/k");
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->size, 12345u);
  EXPECT_EQ(info->etag, "abc");
  head.headers = {{"etag", "\"abc\""}};
  EXPECT_FALSE(parse_head_object(head, "t").is_ok());
  head.headers = {{"content-length", "-1"}};
  EXPECT_FALSE(parse_head_object(head, "t").is_ok());
  // A first-byte GET's answer (where HEAD is refused): the size is Content-Range's total.
  head.status = 206;
  head.headers = {{"content-length", "1"}, {"content-range", "bytes 0-0/98765"}, {"etag", "W/\"x\""}};
  info = parse_head_object(head, "GET https://h/k");
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->size, 98765u);
  EXPECT_EQ(info->etag, "W/x");                                                // weak: compared, never sent in If-Match
  head.headers = {{"content-length", "1"}, {"content-range", "bytes 0-0/*"}};  // size unknown: an error
  EXPECT_FALSE(parse_head_object(head, "t").is_ok());

  HttpResponse part;
  part.headers = {{"etag", "\"p1\""}};
  EXPECT_EQ(parse_part_etag(part, "t").value(), "\"p1\"");
  part.headers.clear();
  EXPECT_FALSE(parse_part_etag(part, "t").is_ok());
  EXPECT_EQ(unquote_etag("W/\"x\""), "W/x");
  EXPECT_EQ(unquote_etag("plain"), "plain");
}

}  // namespace
}  // namespace chute

namespace chute {
namespace {

// Cut and mutated answers (a fixed seed, so the same inputs every run): the parsers return a value or an
// error, never crash, and keep their promises. cpp/fuzz/s3_xml_fuzz.cc explores further under sanitizers.
TEST(S3ProtocolTest, MutatedAnswersNeverCrashTheParsers) {
  const std::string seeds[] = {
      kPage1, "<InitiateMultipartUploadResult><UploadId>a&amp;b</UploadId></InitiateMultipartUploadResult>",
      "<Error><Code>C</Code><Message>&#x41;</Message></Error>"};
  uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  static constexpr char kAlphabet[] = "<>/&;#x\"'abKeyContents01 ";
  for (int i = 0; i < 20000; ++i) {
    std::string doc = seeds[next() % 3];
    for (int m = next() % 4; m >= 0 && !doc.empty(); --m) {
      const size_t at = next() % doc.size();
      switch (next() % 3) {
        case 0:
          doc.erase(at, next() % 8);
          break;
        case 1:
          doc.insert(at, 1, kAlphabet[next() % (sizeof(kAlphabet) - 1)]);
          break;
        default:
          doc.resize(at);
          break;
      }
    }
    auto page = parse_list_objects_v2(doc, "t");
    if (page.is_ok() && page->truncated) EXPECT_FALSE(page->next_token.empty());
    (void)parse_upload_id(doc, "t");
    (void)parse_s3_error(doc);
    (void)check_complete_multipart(doc, "t");
    (void)xml_unescape(doc, "t");
  }
}

}  // namespace
}  // namespace chute
