#include "chute/tar_source.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace chute {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// A ustar member header and its data, padded to 512 bytes.
void add(std::vector<uint8_t>& tar, const std::string& name, const std::string& data, char type = '0') {
  std::vector<uint8_t> h(512, 0);
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(reinterpret_cast<char*>(h.data()) + 100, 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(h.data()) + 108, 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h.data()) + 116, 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h.data()) + 124, 12, "%011lo", static_cast<unsigned long>(data.size()));
  std::snprintf(reinterpret_cast<char*>(h.data()) + 136, 12, "%011o", 0);
  std::memset(h.data() + 148, ' ', 8);
  h[156] = static_cast<uint8_t>(type);
  std::memcpy(h.data() + 257, "ustar\0" "00", 8);
  unsigned sum = 0;
  for (uint8_t c : h) sum += c;
  std::snprintf(reinterpret_cast<char*>(h.data()) + 148, 8, "%06o", sum);
  tar.insert(tar.end(), h.begin(), h.end());
  tar.insert(tar.end(), data.begin(), data.end());
  tar.resize((tar.size() + 511) / 512 * 512, 0);
}

void end(std::vector<uint8_t>& tar) { tar.resize(tar.size() + 1024, 0); }

std::string pax(const std::string& key, const std::string& value) {
  std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

TEST(TarSourceTest, GroupsMembersLikeWebDataset) {
  std::vector<uint8_t> tar;
  add(tar, "000.jpg", "JPEG0");
  add(tar, "000.cls", "3\n");
  add(tar, "./001.cls", " 7 ");  // label before the image; "./" dropped
  add(tar, "001.png", "PNG1");
  add(tar, "001.json", "{}");
  add(tar, "metadata.json", "{}");  // no image: not a sample
  add(tar, "dir", "", '5');
  add(tar, "dir/002.seg.png", "SEG");  // extension "seg.png" is not an image extension
  add(tar, "dir/002.jpeg", "JPEG2");  // no .cls: label -1
  add(tar, "", std::string(150, 'L') + ".jpg", 'L');  // GNU long name for the next member
  add(tar, "ignored", "LONG");
  add(tar, "", pax("path", "pax/name.webp"), 'x');
  add(tar, "short.txt", "PAX");
  end(tar);
  auto samples = scan_tar(tar, "t.tar");
  ASSERT_TRUE(samples.is_ok()) << samples.status().to_string();
  ASSERT_EQ(samples->size(), 5u);
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"000.jpg", 3}, {"001.png", 7}, {"dir/002.jpeg", -1}, {std::string(150, 'L') + ".jpg", -1}, {"pax/name.webp", -1}};
  const std::vector<std::string> data = {"JPEG0", "PNG1", "JPEG2", "LONG", "PAX"};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*samples)[i].member, want[i].first);
    EXPECT_EQ((*samples)[i].label, want[i].second);
    EXPECT_EQ(std::string(tar.begin() + (*samples)[i].offset, tar.begin() + (*samples)[i].offset + (*samples)[i].size),
              data[i]);
  }
}

TEST(TarSourceTest, BadTarsGiveErrorsNamingTheMember) {
  std::vector<uint8_t> tar;
  add(tar, "a.jpg", std::string(1000, 'x'));
  end(tar);
  auto cut = scan_tar(std::span(tar).first(700), "t.tar");
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("t.tar: member a.jpg at offset 0: size 1000 runs past the end"), std::string::npos)
      << cut.status().message();
  auto half_header = scan_tar(std::span(tar).first(300), "t.tar");
  EXPECT_NE(half_header.status().message().find("cut short"), std::string::npos);
  std::vector<uint8_t> flipped = tar;
  flipped[10] ^= 1;
  EXPECT_NE(scan_tar(flipped, "t.tar").status().message().find("bad header checksum"), std::string::npos);
  std::vector<uint8_t> bad_label;
  add(bad_label, "a.jpg", "x");
  add(bad_label, "a.cls", "dog");
  EXPECT_NE(scan_tar(bad_label, "t.tar").status().message().find("member a.cls: label is not an integer"),
            std::string::npos);
  EXPECT_FALSE(scan_tar(bytes_of(std::string(512, 'z')), "t.tar").is_ok());
}

TEST(TarSourceTest, OpensTarsWritesTheIndexAndRebuildsItWhenTheTarChanges) {
  TempDir dir;
  std::vector<uint8_t> a, b;
  add(a, "x/0.jpg", "A0");
  add(a, "x/0.cls", "1");
  add(a, "x/1.jpg", "A1");
  end(a);
  add(b, "y/0.png", "B0");
  add(b, "y/0.cls", "2");
  end(b);
  dir.write("a.tar", a);
  dir.write("b.tar", b);
  const std::string pa = (dir.path() / "a.tar").string(), pb = (dir.path() / "b.tar").string();
  auto src = TarSource::open({pa, pb});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  ASSERT_EQ((*src)->size(), 3);
  std::vector<uint8_t> out;
  ASSERT_TRUE((*src)->read(2, out).is_ok());
  EXPECT_EQ(out, bytes_of("B0"));
  EXPECT_EQ((*src)->label(2), 2);
  EXPECT_EQ((*src)->label(1), -1);
  EXPECT_EQ((*src)->name(1), pa + ":x/1.jpg");
  EXPECT_TRUE(fs::exists(pa + ".chidx"));

  // The tar grows: its index is stale and is rebuilt on open.
  b.clear();
  add(b, "y/0.png", "B0");
  add(b, "y/0.cls", "2");
  add(b, "y/1.jpg", "B1");
  end(b);
  dir.write("b.tar", b);
  auto again = TarSource::open({pa, pb});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ((*again)->size(), 4);
  ASSERT_TRUE((*again)->read(3, out).is_ok());
  EXPECT_EQ(out, bytes_of("B1"));

  // A damaged index file is rebuilt too, never trusted.
  dir.write("a.tar.chidx", std::vector<uint8_t>(300, 0xAB));
  auto rebuilt = TarSource::open({pa});
  ASSERT_TRUE(rebuilt.is_ok());
  EXPECT_EQ((*rebuilt)->size(), 2);
}

TEST(TarSourceTest, PlainTarOfAnImageFolderIsLabelledByClassDirectory) {
  TempDir dir;
  std::vector<uint8_t> tar;
  add(tar, "train/dog/b.jpg", "B");
  add(tar, "train/cat/a.jpg", "A");
  add(tar, "train/dog/sub/c.png", "C");
  add(tar, "train/bird/d.jpg", "D");
  end(tar);
  dir.write("plain.tar", tar);
  auto src = TarSource::open({(dir.path() / "plain.tar").string()});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ((*src)->classes(), (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ((*src)->label(0), 2);
  EXPECT_EQ((*src)->label(1), 1);
  EXPECT_EQ((*src)->label(2), 2);
  EXPECT_EQ((*src)->label(3), 0);

  // An image outside any class directory: no layout, so no labels.
  std::vector<uint8_t> flat;
  add(flat, "train/dog/b.jpg", "B");
  add(flat, "train/top.jpg", "T");
  end(flat);
  dir.write("flat.tar", flat);
  auto unlabelled = TarSource::open({(dir.path() / "flat.tar").string()});
  ASSERT_TRUE(unlabelled.is_ok());
  EXPECT_TRUE((*unlabelled)->classes().empty());
  EXPECT_EQ((*unlabelled)->label(0), -1);
}

}  // namespace
}  // namespace chute
