// ObjectStore on local paths, and its errors that need no server (python/tests/test_object_store.py runs
// it against moto's S3 emulator).
#include "chute/remote/object_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace chute {
namespace {

using testing::TempDir;

std::shared_ptr<ObjectStore> local_store(const EnvMap& env = {}) {
  auto store = ObjectStore::create(nullptr, env, [](const std::string&) -> Result<std::optional<std::string>> {
    return std::optional<std::string>();
  });
  EXPECT_TRUE(store.is_ok()) << store.status().to_string();
  return store.value();
}

std::vector<std::string> urls(const std::vector<ObjectInfo>& infos) {
  std::vector<std::string> out;
  for (const ObjectInfo& i : infos) out.push_back(i.url);
  return out;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ObjectStoreTest, ExpandsLocalPatterns) {
  TempDir dir;
  for (const char* name : {"x-00.tar", "x-01.tar", "x-02.tar", "y.txt", "sub/x-03.tar", "sub/deeper/x-04.tar"}) {
    dir.write(name, bytes(name));
  }
  const std::string root = dir.path().string();
  auto store = local_store();
  EXPECT_EQ(urls(store->expand(root + "/x-{00..01}.tar").value()),
            (std::vector<std::string>{root + "/x-00.tar", root + "/x-01.tar"}));
  EXPECT_EQ(urls(store->expand(root + "/x-*.tar").value()),
            (std::vector<std::string>{root + "/x-00.tar", root + "/x-01.tar", root + "/x-02.tar"}));
  EXPECT_EQ(urls(store->expand(root + "/*/x-*.tar").value()), (std::vector<std::string>{root + "/sub/x-03.tar"}));
  EXPECT_EQ(urls(store->expand("file://" + root + "/sub/").value()),
            (std::vector<std::string>{root + "/sub/deeper/x-04.tar", root + "/sub/x-03.tar"}));
  // Overlapping names come once.
  EXPECT_EQ(store->expand(root + "/{x-00.tar,x-0[0-1].tar}").value().size(), 2u);
  auto info = store->stat(root + "/y.txt");
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->size, 5u);
}

TEST(ObjectStoreTest, EscapedGlobCharactersInLocalPaths) {
  TempDir dir;
  dir.write("run[1]/a.tar", bytes("a"));
  dir.write("run[1]/b.tar", bytes("b"));
  dir.write("run1/c.tar", bytes("c"));
  const std::string root = dir.path().string();
  auto store = local_store();
  // \[ is a literal '[': only the directory named "run[1]" is read.
  EXPECT_EQ(urls(store->expand(root + "/run\\[1\\]/*.tar").value()),
            (std::vector<std::string>{root + "/run[1]/a.tar", root + "/run[1]/b.tar"}));
  // Unescaped, [1] is a class: "run1".
  EXPECT_EQ(urls(store->expand(root + "/run[1]/*.tar").value()), (std::vector<std::string>{root + "/run1/c.tar"}));
  EXPECT_EQ(urls(store->expand(root + "/run\\[1\\]/a.tar").value()),
            (std::vector<std::string>{root + "/run[1]/a.tar"}));
}

TEST(ObjectStoreTest, LocalErrorsNameThePath) {
  TempDir dir;
  const std::string root = dir.path().string();
  auto store = local_store();
  auto none = store->expand(root + "/nothing-*");
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no object matches '" + root + "/nothing-*'"), std::string::npos);
  auto missing = store->stat(root + "/missing");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(root + "/missing"), std::string::npos);
  auto missing_dir = store->expand(root + "/no-dir/*.tar");
  ASSERT_FALSE(missing_dir.is_ok());
  EXPECT_EQ(missing_dir.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->stat(root).status().code(), StatusCode::kInvalidArgument);  // a directory
}

TEST(ObjectStoreTest, LocalReadDownloadAndAtomicUpload) {
  TempDir dir;
  dir.write("src.bin", bytes("0123456789"));
  const std::string root = dir.path().string();
  auto store = local_store();
  EXPECT_EQ(store->read(root + "/src.bin", 3, 4).value(), bytes("3456"));
  EXPECT_FALSE(store->read(root + "/src.bin", 8, 4).is_ok());

  const int fd = ::open((root + "/copy.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(store->download(store->stat(root + "/src.bin").value(), fd).is_ok());
  ::close(fd);
  EXPECT_EQ(slurp(root + "/copy.bin"), "0123456789");

  auto upload = store->begin_upload(root + "/out.bin");
  ASSERT_TRUE(upload.is_ok());
  ASSERT_TRUE((*upload)->write(bytes("ab")).is_ok());
  ASSERT_TRUE((*upload)->write(bytes("cd")).is_ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/out.bin"));  // not before commit
  ASSERT_TRUE((*upload)->commit().is_ok());
  EXPECT_EQ(slurp(root + "/out.bin"), "abcd");
  EXPECT_FALSE((*upload)->write(bytes("x")).is_ok());
  {
    auto dropped = store->begin_upload(root + "/dropped.bin");
    ASSERT_TRUE(dropped.is_ok());
    ASSERT_TRUE((*dropped)->write(bytes("x")).is_ok());
  }
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(root)) ++entries;
  EXPECT_EQ(entries, 3u);  // src.bin, copy.bin, out.bin: no temporary left
}

TEST(ObjectStoreTest, RemoteWithoutAnEngineSaysSo) {
  auto store = local_store();
  const auto st = store->stat("s3://bucket/key").status();
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("libcurl"), std::string::npos);
  EXPECT_NE(st.message().find("s3://bucket/key"), std::string::npos);
}

TEST(ObjectStoreTest, RequestsAreSignedWhenThereAreCredentials) {
  auto store = local_store({{"AWS_ACCESS_KEY_ID", "AKIAKEY"},
                            {"AWS_SECRET_ACCESS_KEY", "secret"},
                            {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000"}});
  auto r = store->request_for("s3://bkt/dir/a b.tar");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->url, "http://127.0.0.1:9000/bkt/dir/a%20b.tar");
  ASSERT_TRUE(r->sigv4.has_value());
  EXPECT_EQ(r->sigv4->access_key, "AKIAKEY");

  auto anonymous = local_store()->request_for("s3://bkt/k");
  ASSERT_TRUE(anonymous.is_ok());
  EXPECT_EQ(anonymous->url, "https://bkt.s3.us-east-1.amazonaws.com/k");
  EXPECT_FALSE(anonymous->sigv4.has_value());

  auto http = local_store()->request_for("https://host/x.tar?sig=1");
  ASSERT_TRUE(http.is_ok());
  EXPECT_EQ(http->url, "https://host/x.tar?sig=1");
  EXPECT_FALSE(http->sigv4.has_value());
  EXPECT_EQ(local_store()->request_for("/local/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(local_store()->request_for("s3://bkt/prefix/").status().code(), StatusCode::kInvalidArgument);
}

TEST(ObjectStoreTest, ConfigurationErrorsWaitForTheirScheme) {
  auto store = local_store({{"AWS_ACCESS_KEY_ID", "only-the-key"}});
  const auto st = store->request_for("s3://bkt/k").status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("must be set together"), std::string::npos);
  EXPECT_TRUE(store->request_for("gs://bkt/k").is_ok());  // gs:// has its own keys
  EXPECT_FALSE(ObjectStore::create(nullptr, {}, disk_file_reader(), {.part_bytes = 1 << 20}).is_ok());
}

}  // namespace
}  // namespace chute
