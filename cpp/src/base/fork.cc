#include "chute/base/fork.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace chute {
namespace {

std::atomic<uint64_t> g_forks{0};  // forks this process descends from, since the first ForkMark

void on_fork_child() { g_forks.fetch_add(1, std::memory_order_relaxed); }

uint64_t forks_now() {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
  return g_forks.load(std::memory_order_relaxed);
}

}  // namespace

ForkMark::ForkMark() : forks_(forks_now()), pid_(getpid()) {}

bool ForkMark::in_child() const { return g_forks.load(std::memory_order_relaxed) != forks_; }

Status ForkMark::child_error(const std::string& what) const {
  return Status(StatusCode::kCancelled,
                "this " + what + " was made in process " + std::to_string(pid_) +
                    " and this process is a fork() of it: its threads do not exist here, so it is closed. "
                    "Make a new one in this process (or start processes with 'spawn'/'forkserver')");
}

}  // namespace chute
