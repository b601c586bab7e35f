#include "chute/io/file_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace chute {
namespace {

using testing::TempDir;

TEST(FileListTest, FromEntriesKeepsPathsAndLabelsAsGiven) {
  TempDir dir;
  // A newline, trailing spaces and a byte that is not UTF-8: a text list could not hold these.
  const std::string odd = "we ird\nname\xff  .jpg";
  dir.write(odd, std::vector<uint8_t>{7, 8});
  dir.write("b.png", std::vector<uint8_t>{9});
  const std::string root = dir.path().string();
  auto list = FileList::from_entries(root, {root + "/" + odd, "b.png"}, {3, -1});
  ASSERT_TRUE(list.is_ok()) << list.status().to_string();
  const FileList& f = **list;
  ASSERT_EQ(f.size(), 2);
  EXPECT_EQ(f.name(0), root + "/" + odd);
  EXPECT_EQ(f.name(1), root + "/b.png");  // relative to root
  EXPECT_EQ(f.key(0), odd);               // what `chute pack` stores: the path below the root
  EXPECT_EQ(f.key(1), "b.png");
  EXPECT_EQ(f.label(0), 3);
  EXPECT_EQ(f.label(1), -1);
  EXPECT_EQ(f.root(), root);
  std::vector<uint8_t> out;
  ASSERT_TRUE(f.read(0, out).is_ok());
  EXPECT_EQ(out, (std::vector<uint8_t>{7, 8}));
}

TEST(FileListTest, FromEntriesNamesTheBadEntry) {
  auto mismatched = FileList::from_entries("/", {"/a.jpg", "/b.jpg"}, {0});
  ASSERT_FALSE(mismatched.is_ok());
  EXPECT_EQ(mismatched.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatched.status().message().find("2 paths but 1 labels"), std::string::npos);

  auto none = FileList::from_entries("/", {}, {});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no sample"), std::string::npos);

  auto empty = FileList::from_entries("/", {"/a.jpg", ""}, {0, 1});
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("entry 1: the path is empty"), std::string::npos);

  auto nul = FileList::from_entries("/", {std::string("/a\0b.jpg", 8)}, {0});
  ASSERT_FALSE(nul.is_ok());
  EXPECT_NE(nul.status().message().find("entry 0: the path holds a NUL byte"), std::string::npos);
}

TEST(FileListTest, ANulInAListedPathIsAnErrorNamingTheLine) {
  TempDir dir;
  dir.write("img000.jpg", std::vector<uint8_t>{1, 2, 3});  // what a path cut at its NUL would read
  const std::string line = std::string("img000.jpg\0junk 0\n", 18);
  dir.write("list.txt", std::vector<uint8_t>(line.begin(), line.end()));
  auto list = FileList::open((dir.path() / "list.txt").string());
  ASSERT_FALSE(list.is_ok()) << "the sample was read from img000.jpg";
  EXPECT_EQ(list.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(list.status().message().find("list.txt:1: a NUL byte at column 11"), std::string::npos)
      << list.status().message();
}

}  // namespace
}  // namespace chute
