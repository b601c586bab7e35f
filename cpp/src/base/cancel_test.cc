#include "chute/base/cancel.h"

#include <gtest/gtest.h>

#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "base/detail/file_lock.h"

namespace chute {
namespace {

TEST(CancelTest, AChildIsCancelledWithItsParentNeverTheReverse) {
  auto parent = CancelToken::make();
  auto child = CancelToken::make(parent);
  auto sibling = CancelToken::make(parent);
  child->cancel();
  EXPECT_TRUE(child->cancelled());
  EXPECT_FALSE(parent->cancelled());
  EXPECT_FALSE(sibling->cancelled());
  parent->cancel();
  EXPECT_TRUE(sibling->cancelled());
}

TEST(CancelTest, AScopeIsTheThreadsUntilItEndsAndNests) {
  EXPECT_EQ(CancelScope::current(), nullptr);
  EXPECT_FALSE(CancelScope::cancelled());
  auto outer = CancelToken::make();
  auto inner = CancelToken::make();
  {
    CancelScope a(outer);
    EXPECT_EQ(CancelScope::current(), outer);
    {
      CancelScope b(inner);
      EXPECT_EQ(CancelScope::current(), inner);
      // Another thread has its own (none).
      std::thread([] { EXPECT_EQ(CancelScope::current(), nullptr); }).join();
    }
    EXPECT_EQ(CancelScope::current(), outer);
    outer->cancel();
    EXPECT_TRUE(CancelScope::cancelled());
  }
  EXPECT_EQ(CancelScope::current(), nullptr);
  EXPECT_FALSE(CancelScope::cancelled());
}

// A wait for a lock that another holder keeps ends with kCancelled once the waiter's token is cancelled
// (a shard cache reader waiting for another process's download), and a waiter without a scope still waits.
TEST(CancelTest, AWaitForAFileLockEndsWhenCancelled) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("chute-cancel-lock-" + std::to_string(::getpid()) + ".lock")).string();
  Result<detail::FileLock> held = detail::FileLock::acquire(path, /*wait=*/true);
  ASSERT_TRUE(held.is_ok()) << held.status().to_string();
  auto token = CancelToken::make();
  auto waiter = std::async(std::launch::async, [&] {
    CancelScope scope(token);
    bool waited = false;
    return detail::FileLock::acquire(path, /*wait=*/true, &waited).status();
  });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);  // it waits
  token->cancel();
  const Status st = waiter.get();
  EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.to_string();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  // Uncancelled, the wait ends when the holder lets go.
  auto plain = std::async(std::launch::async, [&] { return detail::FileLock::acquire(path, true).is_ok(); });
  held->remove();
  EXPECT_TRUE(plain.get());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace chute
