#include "chute/io/tar_source.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "test_util.h"

namespace chute {
namespace {

using testing::add_tar_member;
using testing::end_tar;
using testing::TempDir;
namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string pax(const std::string& key, const std::string& value) {
  std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

TEST(TarSourceTest, GroupsMembersLikeWebDataset) {
  std::vector<uint8_t> tar;
  add_tar_member(tar, "000.jpg", "JPEG0");
  add_tar_member(tar, "000.cls", "3\n");
  add_tar_member(tar, "./001.cls", " 7 ");  // label before the image; "./" dropped
  add_tar_member(tar, "001.png", "PNG1");
  add_tar_member(tar, "001.json", "{}");
  add_tar_member(tar, "metadata.json", "{}");  // no image: not a sample
  add_tar_member(tar, "dir", "", '5');
  add_tar_member(tar, "dir/002.seg.png", "SEG");                 // extension "seg.png" is not an image extension
  add_tar_member(tar, "dir/002.jpeg", "JPEG2");                  // no .cls: label -1
  add_tar_member(tar, "", std::string(150, 'L') + ".jpg", 'L');  // GNU long name for the next member
  add_tar_member(tar, "ignored", "LONG");
  add_tar_member(tar, "", pax("path", "pax/name.webp"), 'x');
  add_tar_member(tar, "short.txt", "PAX");
  end_tar(tar);
  auto scan = scan_tar(tar, "t.tar");
  ASSERT_TRUE(scan.is_ok()) << scan.status().to_string();
  const std::vector<TarSample>* samples = &scan->samples;
  ASSERT_EQ(samples->size(), 5u);
  const std::vector<std::pair<std::string, int64_t>> want = {{"000.jpg", 3},
                                                             {"001.png", 7},
                                                             {"dir/002.jpeg", -1},
                                                             {std::string(150, 'L') + ".jpg", -1},
                                                             {"pax/name.webp", -1}};
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
  add_tar_member(tar, "a.jpg", std::string(1000, 'x'));
  end_tar(tar);
  auto cut = scan_tar(std::span(tar).first(700), "t.tar");
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("t.tar: member a.jpg at offset 0: size 1000 runs past the end"),
            std::string::npos)
      << cut.status().message();
  auto half_header = scan_tar(std::span(tar).first(300), "t.tar");
  EXPECT_NE(half_header.status().message().find("cut short"), std::string::npos);
  std::vector<uint8_t> flipped = tar;
  flipped[10] ^= 1;
  EXPECT_NE(scan_tar(flipped, "t.tar").status().message().find("bad header checksum"), std::string::npos);
  std::vector<uint8_t> bad_label;
  add_tar_member(bad_label, "a.jpg", "x");
  add_tar_member(bad_label, "a.cls", "dog");
  EXPECT_NE(scan_tar(bad_label, "t.tar").status().message().find("member a.cls: label is not an integer"),
            std::string::npos);
  EXPECT_FALSE(scan_tar(bytes_of(std::string(512, 'z')), "t.tar").is_ok());
}

TEST(TarSourceTest, OpensTarsCachesTheIndexOutsideTheDatasetAndRebuildsItWhenTheTarChanges) {
  TempDir dir, cache;
  std::vector<uint8_t> a, b;
  add_tar_member(a, "x/0.jpg", "A0");
  add_tar_member(a, "x/0.cls", "1");
  add_tar_member(a, "x/1.jpg", "A1");
  end_tar(a);
  add_tar_member(b, "y/0.png", "B0");
  add_tar_member(b, "y/0.cls", "2");
  end_tar(b);
  dir.write("a.tar", a);
  dir.write("b.tar", b);
  const std::string pa = (dir.path() / "a.tar").string(), pb = (dir.path() / "b.tar").string();
  const TarOptions options{.cache_dir = cache.path().string()};
  auto src = TarSource::open({pa, pb}, options);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  ASSERT_EQ((*src)->size(), 3);
  std::vector<uint8_t> out;
  ASSERT_TRUE((*src)->read(2, out).is_ok());
  EXPECT_EQ(out, bytes_of("B0"));
  EXPECT_EQ((*src)->label(2), 2);
  EXPECT_EQ((*src)->label(1), -1);
  EXPECT_EQ((*src)->name(1), pa + ":x/1.jpg");
  EXPECT_EQ((*src)->key(1), "x/1.jpg");  // what `chute pack` stores: the member, wherever the tar lies
  // Nothing is written into the dataset; the index is in the cache directory, and reused from there.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2);
  const std::string cached = (*src)->index_path(0);
  EXPECT_TRUE(cached.starts_with(cache.path().string() + "/tar-index/")) << cached;
  EXPECT_TRUE(fs::exists(cached));
  const auto written = fs::last_write_time(cached);
  auto reopened = TarSource::open({pa}, options);
  ASSERT_TRUE(reopened.is_ok());
  EXPECT_EQ((*reopened)->index_path(0), cached);
  EXPECT_EQ(fs::last_write_time(cached), written);
  // Without a cache directory the index stays in memory.
  auto in_memory = TarSource::open({pa});
  ASSERT_TRUE(in_memory.is_ok());
  EXPECT_EQ((*in_memory)->index_path(0), "");

  // The tar grows: its index is stale and is rebuilt on open.
  b.clear();
  add_tar_member(b, "y/0.png", "B0");
  add_tar_member(b, "y/0.cls", "2");
  add_tar_member(b, "y/1.jpg", "B1");
  end_tar(b);
  dir.write("b.tar", b);
  auto again = TarSource::open({pa, pb}, options);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ((*again)->size(), 4);
  ASSERT_TRUE((*again)->read(3, out).is_ok());
  EXPECT_EQ(out, bytes_of("B1"));

  // A damaged index file is rebuilt too, never trusted.
  dir.write("a.tar.chidx", std::vector<uint8_t>(300, 0xAB));
  fs::resize_file(cached, 200);
  auto rebuilt = TarSource::open({pa}, options);
  ASSERT_TRUE(rebuilt.is_ok());
  EXPECT_EQ((*rebuilt)->size(), 2);
}

TEST(TarSourceTest, OneTarIsOneShardInPathOrder) {
  TempDir dir;
  std::vector<uint8_t> a, none, b;
  add_tar_member(a, "0.jpg", "A0");
  add_tar_member(a, "1.jpg", "A1");
  end_tar(a);
  add_tar_member(none, "metadata.json", "{}");  // no image: a shard of no sample
  end_tar(none);
  add_tar_member(b, "0.png", "B0");
  end_tar(b);
  dir.write("a.tar", a);
  dir.write("none.tar", none);
  dir.write("b.tar", b);
  const std::string pa = (dir.path() / "a.tar").string(), pn = (dir.path() / "none.tar").string(),
                    pb = (dir.path() / "b.tar").string();
  auto src = TarSource::open({pb, pn, pa});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ((*src)->shard_sizes(), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ((*src)->name(0), pb + ":0.png");
  EXPECT_EQ((*src)->name(1), pa + ":0.jpg");
  EXPECT_EQ((*src)->name(2), pa + ":1.jpg");
}

TEST(TarSourceTest, ATarRewrittenWithTheSameSizeAndMtimeIsReindexed) {
  TempDir dir, cache;
  auto tar_with_labels = [](const std::string& first, const std::string& second) {
    std::vector<uint8_t> t;
    add_tar_member(t, "0.jpg", "IMG0");
    add_tar_member(t, "0.cls", first);
    add_tar_member(t, "1.jpg", "IMG1");
    add_tar_member(t, "1.cls", second);
    end_tar(t);
    return t;
  };
  dir.write("t.tar", tar_with_labels("3", "4"));
  const std::string path = (dir.path() / "t.tar").string();
  const auto mtime = fs::last_write_time(path);
  const TarOptions options{.cache_dir = cache.path().string()};
  auto first = TarSource::open({path}, options);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ((*first)->label(0), 3);
  // Same size, same mtime, other labels: the index must not be reused.
  dir.write("t.tar", tar_with_labels("5", "6"));
  fs::last_write_time(path, mtime);
  auto second = TarSource::open({path}, options);
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ((*second)->label(0), 5);
  EXPECT_EQ((*second)->label(1), 6);
  // The same holds for an index written beside the tar on request (`chute index`).
  ASSERT_TRUE(write_tar_indexes({path}).is_ok());
  dir.write("t.tar", tar_with_labels("7", "8"));
  fs::last_write_time(path, mtime);
  auto third = TarSource::open({path}, options);
  ASSERT_TRUE(third.is_ok());
  EXPECT_EQ((*third)->label(1), 8);
}

TEST(TarSourceTest, WebDatasetKeyFollowsItsRegularExpression) {
  struct Case {
    const char* path;
    const char* key;  // nullptr: no split
    const char* ext;
  };
  // Expected values are what re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path) gives.
  const Case cases[] = {
      {"img.jpg", "img", "jpg"},         {"img.0.jpg", "img", "0.jpg"},
      {"a.b/c.d.e", "a.b/c", "d.e"},     {"dir/img.seg.png", "dir/img", "seg.png"},
      {"noext", nullptr, nullptr},       {"dir.x/noext", nullptr, nullptr},
      {".hidden.jpg", nullptr, nullptr}, {"a/dir/.hidden.jpg", "a/dir/", "hidden.jpg"},
      {"a.b/.x.jpg", nullptr, nullptr},  {"img.", "img", ""},
  };
  for (const Case& c : cases) {
    std::string_view key, ext;
    const bool split = webdataset_key(c.path, &key, &ext);
    EXPECT_EQ(split, c.key != nullptr) << c.path;
    if (split && c.key) {
      EXPECT_EQ(key, c.key) << c.path;
      EXPECT_EQ(ext, c.ext) << c.path;
    }
  }
}

TEST(TarSourceTest, LinksReadTheirTargetsAndSkippedMembersAreReported) {
  std::vector<uint8_t> tar;
  add_tar_member(tar, "root/a", "", '5');
  add_tar_member(tar, "root/a/img.0.jpg", "A0");
  add_tar_member(tar, "root/a/img.1.jpg", "A1");
  add_tar_member(tar, "root/a/hard.jpg", "", '1', "root/a/img.0.jpg");   // hard link: A0
  add_tar_member(tar, "root/a/soft.jpg", "", '2', "img.1.jpg");          // symbolic link to a file: A1
  add_tar_member(tar, "root/b", "", '2', "a");                           // a directory link: a's 4 images again
  add_tar_member(tar, "root/a/gone.jpg", "", '2', "missing.jpg");        // dangling
  add_tar_member(tar, "root/a/out.jpg", "", '2', "../../../etc/x.jpg");  // leaves the archive
  add_tar_member(tar, "root/a/loop", "", '2', ".");                      // a directory holding its own link
  add_tar_member(tar, "root/a/notes.txt", "text");                       // not an image
  add_tar_member(tar, "root/fifo", "", '6');
  end_tar(tar);
  auto scan = scan_tar(tar, "t.tar");
  ASSERT_TRUE(scan.is_ok()) << scan.status().to_string();
  std::vector<std::pair<std::string, std::string>> got;
  for (const TarSample& s : scan->samples)
    got.emplace_back(s.member, std::string(tar.begin() + s.offset, tar.begin() + s.offset + s.size));
  const std::vector<std::pair<std::string, std::string>> want = {
      {"root/a/img.0.jpg", "A0"}, {"root/a/img.1.jpg", "A1"}, {"root/a/hard.jpg", "A0"}, {"root/a/soft.jpg", "A1"},
      {"root/b/img.0.jpg", "A0"}, {"root/b/img.1.jpg", "A1"}, {"root/b/hard.jpg", "A0"}, {"root/b/soft.jpg", "A1"}};
  EXPECT_EQ(got, want);
  std::map<std::string, std::vector<std::string>> skipped;
  for (const TarSkipped& s : scan->skipped) {
    EXPECT_EQ(s.count, s.examples.size());
    skipped[s.reason] = s.examples;
  }
  const std::map<std::string, std::vector<std::string>> want_skipped = {
      {"symbolic link to a member that is not in the archive", {"root/a/gone.jpg"}},
      {"symbolic link pointing outside the archive", {"root/a/out.jpg"}},
      {"symbolic link to a directory that holds it (a loop)", {"root/a/loop"}},
      {"not an image file", {"root/b/notes.txt", "root/a/notes.txt"}},  // b mirrors a
      {"not a regular file (a device or FIFO)", {"root/fifo"}}};
  EXPECT_EQ(skipped, want_skipped);
}

TEST(TarSourceTest, WebDatasetSamplesKeepGroupingByKeyWithSeveralDots) {
  std::vector<uint8_t> tar;
  add_tar_member(tar, "s/000.0.jpg", "IMG0");  // key "s/000", extension "0.jpg": the image by its last extension
  add_tar_member(tar, "s/000.cls", "4");
  add_tar_member(tar, "s/001.seg.png", "MASK");
  add_tar_member(tar, "s/001.jpg", "IMG1");  // an exact image extension wins over "seg.png"
  add_tar_member(tar, "s/001.cls", "5");
  add_tar_member(tar, "s/001.CLS", "6");  // WebDataset lower-cases extensions: a repeat
  add_tar_member(tar, "__meta__/info.json", "{}");
  add_tar_member(tar, "README", "no dot");
  end_tar(tar);
  auto scan = scan_tar(tar, "t.tar");
  ASSERT_TRUE(scan.is_ok()) << scan.status().to_string();
  ASSERT_EQ(scan->samples.size(), 2u);
  EXPECT_EQ(scan->samples[0].member, "s/000.0.jpg");
  EXPECT_EQ(scan->samples[0].label, 4);
  EXPECT_EQ(scan->samples[1].member, "s/001.jpg");
  EXPECT_EQ(scan->samples[1].label, 5);
  std::vector<std::string> reasons;
  for (const TarSkipped& s : scan->skipped) reasons.push_back(s.reason);
  EXPECT_EQ(reasons,
            (std::vector<std::string>{"extension repeated within one WebDataset sample", "WebDataset metadata (__*__)",
                                      "no extension (WebDataset names are <key>.<extension>)"}));
}

TEST(TarSourceTest, PlainTarOfAnImageFolderIsLabelledByClassDirectory) {
  TempDir dir;
  std::vector<uint8_t> tar;
  add_tar_member(tar, "train/dog/b.jpg", "B");
  add_tar_member(tar, "train/cat/a.jpg", "A");
  add_tar_member(tar, "train/dog/sub/c.png", "C");
  add_tar_member(tar, "train/bird/d.jpg", "D");
  end_tar(tar);
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
  add_tar_member(flat, "train/dog/b.jpg", "B");
  add_tar_member(flat, "train/top.jpg", "T");
  end_tar(flat);
  dir.write("flat.tar", flat);
  auto unlabelled = TarSource::open({(dir.path() / "flat.tar").string()});
  ASSERT_TRUE(unlabelled.is_ok());
  EXPECT_TRUE((*unlabelled)->classes().empty());
  EXPECT_EQ((*unlabelled)->label(0), -1);
}

}  // namespace
}  // namespace chute
