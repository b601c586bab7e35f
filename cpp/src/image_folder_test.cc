#include "chute/image_folder.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace chute {
namespace {

using testing::TempDir;

TEST(ImageFolderTest, ListsLikeTorchvision) {
  TempDir dir;
  const std::vector<uint8_t> bytes{1, 2, 3};
  dir.write("dog/b.jpg", bytes);
  dir.write("dog/a.JPEG", bytes);
  dir.write("dog/notes.txt", bytes);      // not an image: ignored
  dir.write("dog/sub/c.png", bytes);      // nested: included after the class dir's own files
  dir.write("dog/sub-x/d.jpg", bytes);    // "sub-x" < "sub/" in byte order, like Python's sorted()
  dir.write("cat/z.webp", bytes);
  auto folder = ImageFolder::open(dir.path().string());
  ASSERT_TRUE(folder.is_ok()) << folder.status().to_string();
  const auto& f = **folder;
  EXPECT_EQ(f.classes(), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(f.size(), 5);
  const std::string root = dir.path().string();
  EXPECT_EQ(f.name(0), root + "/cat/z.webp");
  EXPECT_EQ(f.name(1), root + "/dog/a.JPEG");
  EXPECT_EQ(f.name(2), root + "/dog/b.jpg");
  EXPECT_EQ(f.name(3), root + "/dog/sub/c.png");
  EXPECT_EQ(f.name(4), root + "/dog/sub-x/d.jpg");
  EXPECT_EQ(f.label(0), 0);
  EXPECT_EQ(f.label(4), 1);
  std::vector<uint8_t> out;
  ASSERT_TRUE(f.read(2, out).is_ok());
  EXPECT_EQ(out, bytes);
}

TEST(ImageFolderTest, ErrorsNameTheProblem) {
  TempDir dir;
  auto none = ImageFolder::open(dir.path().string());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("Couldn't find any class folder"), std::string::npos);

  dir.write("a/x.jpg", {1});
  dir.write("b/readme.md", {1});
  auto empty_class = ImageFolder::open(dir.path().string());
  ASSERT_FALSE(empty_class.is_ok());
  EXPECT_NE(empty_class.status().message().find("Found no valid file for the classes b"), std::string::npos);

  auto missing = ImageFolder::open((dir.path() / "nope").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ImageFolderTest, ReadOfVanishedFileIsAnError) {
  TempDir dir;
  dir.write("a/x.jpg", {1, 2});
  auto folder = ImageFolder::open(dir.path().string());
  ASSERT_TRUE(folder.is_ok());
  std::filesystem::remove(dir.path() / "a/x.jpg");
  std::vector<uint8_t> out;
  const Status st = (*folder)->read(0, out);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace chute
