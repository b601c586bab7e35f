#include "chute/io/image_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "test_util.h"

namespace chute {
namespace {

using testing::TempDir;

TEST(ImageFolderTest, ListsLikeTorchvision) {
  TempDir dir;
  const std::vector<uint8_t> bytes{1, 2, 3};
  dir.write("dog/b.jpg", bytes);
  dir.write("dog/a.JPEG", bytes);
  dir.write("dog/notes.txt", bytes);    // not an image: ignored
  dir.write("dog/sub/c.png", bytes);    // nested: included after the class dir's own files
  dir.write("dog/sub-x/d.jpg", bytes);  // "sub-x" < "sub/" in byte order, like Python's sorted()
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
  EXPECT_EQ(f.key(0), "cat/z.webp");  // what `chute pack` stores: the path below the root
  EXPECT_EQ(f.key(3), "dog/sub/c.png");
  EXPECT_EQ(f.label(0), 0);
  EXPECT_EQ(f.label(4), 1);
  std::vector<uint8_t> out;
  ASSERT_TRUE(f.read(2, out).is_ok());
  EXPECT_EQ(out, bytes);
}

TEST(ImageFolderTest, ListsOnlyFormatsChuteDecodesAndCountsTheRest) {
  TempDir dir;
  const std::vector<uint8_t> bytes{1, 2, 3};
  for (const char* name : {"a/1.jpg", "a/2.JPEG", "a/3.png", "a/4.WebP", "a/5.bmp", "a/6.TIF", "a/7.tiff", "a/8.ppm",
                           "a/9.pgm", "a/readme.txt"})
    dir.write(name, bytes);
  auto folder = ImageFolder::open(dir.path().string());
  ASSERT_TRUE(folder.is_ok()) << folder.status().to_string();
  ASSERT_EQ((*folder)->size(), 4);
  EXPECT_EQ((*folder)->name(3), dir.path().string() + "/a/4.WebP");
  EXPECT_EQ((*folder)->left_out().size(), 5u);

  dir.write("b/only.bmp", bytes);
  auto empty = ImageFolder::open(dir.path().string());
  ASSERT_FALSE(empty.is_ok());
  const std::string& msg = empty.status().message();
  EXPECT_NE(msg.find("Supported extensions are: .jpg, .jpeg, .png, .webp"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(".bmp,"), std::string::npos) << msg;  // not advertised
  EXPECT_NE(msg.find("files in formats chute cannot decode were left out"), std::string::npos) << msg;
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

// A FIFO (or a device, or a socket) with an image name is indexed like a file. Opening a FIFO for reading
// blocks until a writer appears, so a worker used to hang in read() forever, and close() with it, waiting
// for that worker. It must be an error at once instead.
TEST(ImageFolderTest, ReadOfAFifoIsAnErrorNotAHang) {
  TempDir dir;
  dir.write("a/x.jpg", {1, 2});
  ASSERT_EQ(::mkfifo((dir.path() / "a/y.jpg").c_str(), 0644), 0);
  auto folder = ImageFolder::open(dir.path().string());
  ASSERT_TRUE(folder.is_ok());
  ASSERT_EQ((*folder)->size(), 2);
  // On its own thread, so that a regression fails the test instead of hanging it.
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  std::thread([folder = *folder, result] {
    std::vector<uint8_t> out;
    result->set_value(folder->read(1, out));
  }).detach();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "read() of a FIFO blocked";
  const Status st = done.get();
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.to_string();
}

// Sources promise that read() may run on many threads at once (source.h). Every thread reads every file
// of one folder, in its own order, and must get each file's own bytes; run under TSan by scripts/test.sh.
TEST(ImageFolderTest, ConcurrentReadsOfOneSourceReturnTheRightBytes) {
  TempDir dir;
  constexpr int kFiles = 24, kThreads = 8, kRounds = 20;
  std::vector<std::vector<uint8_t>> contents;
  for (int i = 0; i < kFiles; ++i) {
    std::vector<uint8_t> bytes(1000 + 997 * i);
    for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(j * 31 + i * 7 + j / 251);
    char name[32];
    std::snprintf(name, sizeof(name), "c%d/%03d.jpg", i % 3, i);
    dir.write(name, bytes);
    contents.push_back(std::move(bytes));
  }
  auto opened = ImageFolder::open(dir.path().string());
  ASSERT_TRUE(opened.is_ok());
  std::shared_ptr<const Source> source = *opened;
  ASSERT_EQ(source->size(), kFiles);
  // Index -> expected bytes, through the source's own names (files are listed by class, then name).
  std::vector<const std::vector<uint8_t>*> expected(kFiles);
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = source->name(i);
    expected[i] = &contents[std::stoi(name.substr(name.size() - 7, 3))];
  }
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;  // reused across reads, as a worker does
      for (int r = 0; r < kRounds; ++r) {
        for (int k = 0; k < kFiles; ++k) {
          const int i = (k * (2 * t + 1) + r) % kFiles;  // a different order on every thread
          if (!source->read(i, out).is_ok())
            ++failures;
          else if (out != *expected[i])
            ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace chute
