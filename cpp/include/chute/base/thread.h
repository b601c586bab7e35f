// Native threads: named before they run, and a creation failure is a Status, never std::terminate.
//
// Every thread chute starts is named ("chute-worker", "chute-gather", ...: what top -H, ps -L, py-spy,
// gdb and /proc/self/task/*/comm show). The name is set twice: by the new thread itself, as the first
// thing it does, so that no work ever runs under another name; and by the creator through its pthread_t
// before start_thread() returns, so that anyone who looks after that sees the name, even if the thread
// has not been scheduled yet.
//
// std::thread's constructor throws std::system_error when the kernel refuses a thread (EAGAIN: a cgroup
// pids.max, ulimit -u, kernel.threads-max; or no address space for its stack under ulimit -v), and an
// uncaught throw in a constructor of a pool is std::terminate. start_thread() returns that failure as
// kResourceExhausted, with a message that names the limits in force.
//
// Pools: start_threads() starts as many as it can and returns why it stopped. Each pool then decides:
// the Loader and the pack writer run with the threads they got (at least one) and say so once on
// stderr; the Gatherer runs with any number, even none (its consumer copies the rows itself). A pool
// that gets no thread at all, where it needs one, fails with that Status.
//
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "chute/base/status.h"

namespace chute {

// Sets the calling thread's name (at most 15 characters are kept).
void set_current_thread_name(const std::string& name);
// Names another thread through its handle; best effort (a thread that already exited keeps no name).
void set_thread_name(std::thread::native_handle_type handle, const std::string& name);
// The error for a thread the kernel refused (`err`: errno, or ENOMEM for std::bad_alloc): names the
// thread and the limits that can cause it, with their current values.
Status thread_start_error(const std::string& name, int err);

// Starts `fn` on a new thread named `name`. Thread is std::thread or std::jthread.
template <class Thread = std::thread>
Result<Thread> start_thread(const std::string& name, std::function<void()> fn) {
  try {
    Thread t([name, fn = std::move(fn)] {
      set_current_thread_name(name);
      fn();
    });
    set_thread_name(t.native_handle(), name);
    return t;
  } catch (const std::system_error& e) {
    return thread_start_error(name, e.code().value());
  } catch (const std::bad_alloc&) {
    return thread_start_error(name, ENOMEM);
  }
}

// Appends up to `count` threads running fn(i), i = first, first + 1, ..., to `threads`, stopping at the
// first one the kernel refuses. Returns that refusal (the threads started before it keep running), or
// ok when all were started.
template <class Thread = std::thread>
Status start_threads(const std::string& name, int first, int count, const std::function<void(int)>& fn,
                     std::vector<Thread>& threads) {
  for (int i = first; i < first + count; ++i) {
    Result<Thread> t = start_thread<Thread>(name, [fn, i] { fn(i); });
    if (!t.is_ok()) return t.status();
    threads.push_back(std::move(t.value()));
  }
  return Status::ok();
}

}  // namespace chute
