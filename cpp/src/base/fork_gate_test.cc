// ForkGate: a fork waits for work in progress, no work starts while it is prepared, and a child can take
// any lock a chute thread takes inside its work.
#include "chute/base/fork_gate.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace chute {
namespace {

// Forks; the child runs `child` and exits with its code. Returns that code, or -1 if the child did not exit
// within `seconds` (then it is killed). The child's end of a pipe closes when it exits: the parent waits
// on that, with a deadline, instead of polling waitpid.
template <class F>
int fork_and_wait(F child, int seconds = 60) {
  int fds[2];
  if (pipe(fds) != 0) return -2;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    _exit(child());
  }
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  const int ready = poll(&p, 1, seconds * 1000);
  close(fds[0]);
  int status = 0;
  if (ready == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ForkGateTest, ForkWaitsForWorkInProgress) {
  std::atomic<bool> entered{false}, left{false}, forked{false};
  std::thread worker([&] {
    ForkGate::Work work;
    entered = true;
    while (!ForkGate::fork_pending() && !forked) {  // `forked`: a fork that did not wait has returned
    }
    left = true;  // the last thing this work does: a fork that did not wait would copy `left == false`
  });
  while (!entered) {
  }
  const int64_t waited_before = ForkGate::forks_waited();
  const int code = fork_and_wait([&] { return left.load() ? 0 : 1; });
  forked = true;
  worker.join();
  EXPECT_EQ(code, 0) << "1: the fork copied a thread in the middle of its work; -1: the child hung";
  EXPECT_EQ(ForkGate::forks_waited(), waited_before + 1);
}

// A lock taken only inside work stands for a library's internal lock (libwebp's set-up, the C++ runtime's
// static-initialisation guard): the child must always find it free.
TEST(ForkGateTest, ChildFindsLocksTakenInsideWorkFree) {
  std::mutex library;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      while (!stop) {
        ForkGate::Work work;
        std::lock_guard<std::mutex> lock(library);
        rounds.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  int failures = 0;
  for (int i = 0; i < 40; ++i) {
    const int64_t before = rounds.load();
    while (rounds.load() < before + 10) {  // the threads are busy in their work when the fork comes
    }
    const int code = fork_and_wait([&] {
      if (!library.try_lock()) return 1;
      library.unlock();
      return 0;
    });
    failures += code != 0;
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0) << "children found the lock held by a thread that does not exist there";
}

TEST(ForkGateTest, PausedWaitDoesNotHoldTheForkBack) {
  std::mutex mu;
  std::condition_variable cv;
  bool paused = false, released = false;
  std::thread worker([&] {
    ForkGate::Work work;
    ForkGate::Pause pause;  // waits for something only the forking thread provides, after its fork
    std::unique_lock<std::mutex> lock(mu);
    paused = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return paused; });
  }
  const int code = fork_and_wait([] { return 0; });
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  worker.join();
  EXPECT_EQ(code, 0);
}

TEST(ForkGateTest, ThreadForkingInsideItsOwnWorkDoesNotWaitForItself) {
  ForkGate::Work outer;
  ForkGate::Work nested;  // counted once
  const int code = fork_and_wait([] {
    // The child's gate is fresh and works: a thread of its own enters and leaves it.
    std::thread t([] { ForkGate::Work work; });
    t.join();
    return ForkGate::fork_pending() ? 1 : 0;
  });
  EXPECT_EQ(code, 0);
  EXPECT_FALSE(ForkGate::fork_pending());
}

}  // namespace
}  // namespace chute
