#include "chute/base/environment.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <new>

#include "chute/engine/loader.h"
#include "chute/io/image_folder.h"
#include "chute/pack/pack_writer.h"
#include "test_util.h"

namespace chute {
namespace {

using testing::MemorySource;

std::vector<std::vector<uint8_t>> small_jpegs(int n) {
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < n; ++i) images.push_back(testing::encode_jpeg(testing::synthetic_rgb(40, 32, i), 40, 32));
  return images;
}

// Index `bad` fails `times` times (-1: always) with `code`, or throws std::bad_alloc; counts its reads.
class FlakySource final : public Source {
 public:
  FlakySource(int n, int64_t bad, int times, StatusCode code, bool throw_bad_alloc = false)
      : inner_(small_jpegs(n), 1 << 30), bad_(bad), times_(times), code_(code), throw_(throw_bad_alloc) {}
  int64_t size() const override { return inner_.size(); }
  int64_t label(int64_t i) const override { return inner_.label(i); }
  std::string name(int64_t i) const override { return inner_.name(i); }
  Status read(int64_t i, std::vector<uint8_t>& out) const override {
    if (i == bad_) {
      const int k = bad_reads_.fetch_add(1);
      if (times_ < 0 || k < times_) {
        if (throw_) throw std::bad_alloc();
        return Status(code_, "injected failure");
      }
    }
    return inner_.read(i, out);
  }
  int bad_reads() const { return bad_reads_.load(); }

 private:
  MemorySource inner_;
  int64_t bad_;
  int times_;
  StatusCode code_;
  bool throw_;
  mutable std::atomic<int> bad_reads_{0};
};

struct EpochResult {
  std::vector<int64_t> labels;
  Status error;
};

EpochResult run_epoch(const std::shared_ptr<const Source>& source, ErrorPolicy policy, LoaderOptions o = {}) {
  o.batch_size = 4;
  o.num_threads = 2;
  o.on_error = policy;
  auto pipeline = Pipeline::create({CenterCrop{16, 16}});
  auto loader = Loader::create(source, std::move(*pipeline), o);
  EXPECT_TRUE(loader.is_ok()) << loader.status().to_string();
  EpochResult run;
  EXPECT_TRUE((*loader)->start_epoch(0).is_ok());
  for (;;) {
    auto batch = (*loader)->next();
    if (!batch.is_ok()) {
      run.error = batch.status();
      break;
    }
    if (!*batch) break;
    for (int64_t i = 0; i < (*batch)->size(); ++i) run.labels.push_back((*batch)->labels()[i]);
  }
  EXPECT_TRUE((*loader)->errors().empty());  // an environment failure is never recorded as a bad sample
  return run;
}

TEST(EnvironmentTest, ErrnosOfTheMachineAreEnvironmentErrorsNamingTheLimit) {
  for (int err : {EMFILE, ENFILE, ENOMEM, EAGAIN, EINTR, EIO}) {
    EXPECT_TRUE(is_environment_errno(err)) << err;
    EXPECT_EQ(errno_status(err, "cannot open").code(), StatusCode::kEnvironment) << err;
  }
  EXPECT_NE(errno_status(EMFILE, "cannot open").message().find("ulimit -n"), std::string::npos);
  EXPECT_EQ(errno_status(ENOENT, "cannot open").code(), StatusCode::kNotFound);
  EXPECT_EQ(errno_status(EACCES, "cannot open").code(), StatusCode::kIoError);  // the file's own permission
  EXPECT_EQ(errno_status(EISDIR, "read failed").code(), StatusCode::kIoError);
  EXPECT_EQ(out_of_memory("decoding", 3 << 20).code(), StatusCode::kEnvironment);
}

TEST(EnvironmentTest, ATransientFailureIsRetriedAndTheSampleDelivered) {
  auto source = std::make_shared<FlakySource>(10, 5, kEnvironmentAttempts - 1, StatusCode::kEnvironment);
  const EpochResult run = run_epoch(source, ErrorPolicy::kSkip);
  ASSERT_TRUE(run.error.is_ok()) << run.error.to_string();
  EXPECT_EQ(run.labels, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(source->bad_reads(), kEnvironmentAttempts);
}

TEST(EnvironmentTest, APersistentEnvironmentFailureEndsTheEpochEvenWhenSkipping) {
  for (ErrorPolicy policy : {ErrorPolicy::kSkip, ErrorPolicy::kRaise}) {
    auto source = std::make_shared<FlakySource>(10, 5, -1, StatusCode::kEnvironment);
    const EpochResult run = run_epoch(source, policy);
    EXPECT_EQ(run.error.code(), StatusCode::kEnvironment) << run.error.to_string();
    EXPECT_NE(run.error.message().find("sample 5 (mem://5)"), std::string::npos) << run.error.message();
    EXPECT_EQ(run.labels, (std::vector<int64_t>{0, 1, 2, 3}));  // the batches before it, nothing after
    EXPECT_EQ(source->bad_reads(), kEnvironmentAttempts);
  }
}

TEST(EnvironmentTest, BadAllocOnAWorkerBecomesTheSamplesErrorNotATerminate) {
  auto source = std::make_shared<FlakySource>(10, 6, -1, StatusCode::kOk, /*throw_bad_alloc=*/true);
  const EpochResult run = run_epoch(source, ErrorPolicy::kSkip);
  EXPECT_EQ(run.error.code(), StatusCode::kEnvironment) << run.error.to_string();
  EXPECT_NE(run.error.message().find("sample 6 (mem://6)"), std::string::npos) << run.error.message();
  EXPECT_NE(run.error.message().find("out of memory"), std::string::npos) << run.error.message();
  // An allocation that fails once, then succeeds (memory freed meanwhile), costs nothing.
  auto once = std::make_shared<FlakySource>(10, 6, 1, StatusCode::kOk, /*throw_bad_alloc=*/true);
  const EpochResult recovered = run_epoch(once, ErrorPolicy::kSkip);
  ASSERT_TRUE(recovered.error.is_ok()) << recovered.error.to_string();
  EXPECT_EQ(recovered.labels.size(), 10u);
}

TEST(EnvironmentTest, DataErrorsAreNotRetried) {
  auto source = std::make_shared<FlakySource>(10, 5, -1, StatusCode::kCorruptData);
  const auto pipeline_run = [&] {
    LoaderOptions o;
    o.batch_size = 4, o.num_threads = 2, o.on_error = ErrorPolicy::kSkip;
    auto loader = Loader::create(source, std::move(*Pipeline::create({CenterCrop{16, 16}})), o);
    EXPECT_TRUE((*loader)->start_epoch(0).is_ok());
    int64_t n = 0;
    for (auto b = (*loader)->next(); b.is_ok() && *b; b = (*loader)->next()) n += (*b)->size();
    EXPECT_EQ((*loader)->errors().size(), 1u);
    return n;
  };
  EXPECT_EQ(pipeline_run(), 9);
  EXPECT_EQ(source->bad_reads(), 1);
}

TEST(MaxFileBytesTest, AFileOverTheCapIsRefusedBeforeItIsRead) {
  testing::TempDir dir;
  dir.write("big.bin", std::vector<uint8_t>(5000, 7));
  std::vector<uint8_t> out;
  Status st = read_file((dir.path() / "big.bin").string(), out, 4096);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("max_file_bytes"), std::string::npos) << st.message();
  EXPECT_EQ(out.capacity(), 0u);  // nothing allocated for it
  ASSERT_TRUE(read_file((dir.path() / "big.bin").string(), out, 5000).is_ok());
  EXPECT_EQ(out.size(), 5000u);
}

TEST(MaxFileBytesTest, TheLoaderSkipsASampleOverTheCapAsABadSample) {
  auto images = small_jpegs(10);
  images[3].resize(images[3].size() + 100000, 0);  // trailing bytes after EOI: still a valid JPEG
  const uint64_t cap = 50000;
  ASSERT_LT(small_jpegs(10)[0].size(), cap);
  auto source = std::make_shared<MemorySource>(images, 1 << 30);
  LoaderOptions o;
  o.batch_size = 4, o.num_threads = 2, o.on_error = ErrorPolicy::kSkip;
  o.decode.max_file_bytes = cap;
  auto loader = Loader::create(source, std::move(*Pipeline::create({CenterCrop{16, 16}})), o);
  ASSERT_TRUE(loader.is_ok());
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  int64_t n = 0;
  for (auto b = (*loader)->next(); b.is_ok() && *b; b = (*loader)->next()) n += (*b)->size();
  EXPECT_EQ(n, 9);
  const auto errors = (*loader)->errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].index, 3);
  EXPECT_EQ(errors[0].status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(errors[0].status.message().find("max_file_bytes"), std::string::npos);
}

TEST(PrefetchTest, AnExplicitPrefetchIsLoweredToFitMaxMemory) {
  auto source = std::make_shared<MemorySource>(small_jpegs(8), 1 << 30);
  LoaderOptions o;
  o.batch_size = 4, o.num_threads = 1, o.prefetch = 1000000;
  const size_t slot = 4 * (16 * 16 * 3 + sizeof(int64_t));
  o.max_memory = 10 * slot;  // 10 buffers: prefetch 8 + 2
  auto loader = Loader::create(source, std::move(*Pipeline::create({CenterCrop{16, 16}})), o);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  EXPECT_EQ((*loader)->prefetch(), 8);
  EXPECT_EQ((*loader)->notices().size(), 1u);  // the engine says so, for the caller to show
  EXPECT_LE((*loader)->stats().ring_slots * (*loader)->stats().slot_bytes, o.max_memory);
  o.max_memory = slot;  // not even prefetch 1's 3 buffers: refused, never run over max_memory
  auto small = Loader::create(source, std::move(*Pipeline::create({CenterCrop{16, 16}})), o);
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("fewer than 3 batch buffers"), std::string::npos);
}

}  // namespace
}  // namespace chute

namespace chute {
namespace {

std::vector<std::string> entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(PackFailureTest, BadAllocOnAReaderFailsThePackAndLeavesNothingBehind) {
  testing::TempDir dir;
  const auto dst = dir.path() / "new" / "packed";
  FlakySource source(40, 30, -1, StatusCode::kOk, /*throw_bad_alloc=*/true);
  // Small shards: several are written (as temporary files) before sample 30 fails.
  auto result = pack(source, {}, {.dst = dst.string(), .shard_size = 4096, .num_threads = 2});
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kEnvironment) << result.status().to_string();
  EXPECT_NE(result.status().message().find("sample 30 (mem://30)"), std::string::npos);
  EXPECT_TRUE(entries(dst).empty());  // no shard, temporary or not, and no index
}

TEST(PackFailureTest, ADataErrorRemovesTemporaryFilesButKeepsTheUsersDirectory) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "mine");
  dir.write("mine/notes.txt", {'h', 'i'});
  FlakySource source(40, 30, -1, StatusCode::kCorruptData);
  auto result = pack(source, {}, {.dst = (dir.path() / "mine").string(), .shard_size = 4096, .num_threads = 2});
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kCorruptData);
  EXPECT_EQ(entries(dir.path() / "mine"), std::vector<std::string>{"notes.txt"});
}

TEST(PackFailureTest, ASampleOverMaxFileBytesStopsThePackNamingIt) {
  testing::TempDir dir;
  auto images = small_jpegs(6);
  images[4].resize(images[4].size() + 20000, 0);
  MemorySource source(images, 1 << 30);
  auto result = pack(source, {}, {.dst = (dir.path() / "p").string(), .num_threads = 2, .max_file_bytes = 10000});
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(result.status().message().find("sample 4 (mem://4)"), std::string::npos) << result.status().message();
  EXPECT_NE(result.status().message().find("max_file_bytes"), std::string::npos);
  EXPECT_TRUE(entries(dir.path() / "p").empty());
}

}  // namespace
}  // namespace chute
