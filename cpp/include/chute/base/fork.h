// fork() and native threads: what a child process inherits from an engine that runs threads.
//
// fork() copies the parent's memory but only the thread that called it. In the child, an engine's
// threads do not exist: joining them waits forever, a mutex one of them held stays locked, and
// destroying a condition variable they were waiting on blocks (glibc waits for its waiters to leave).
// A child that only calls sys.exit() would hang in the engine's destructor.
//
// So every engine that owns threads (Loader, Gatherer) takes a ForkMark when it is made. In a child,
// the mark says so, and the engine becomes inert: close() returns at once without joining or locking;
// every other call fails with the error below; its destructor leaks what it cannot safely destroy
// (threads, locks, condition variables; the child's copy of that memory is freed when the child exits).
// A handler installed with pthread_atfork counts forks in the child, so a check is one atomic load.
//
// Thread-safety: any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "chute/base/status.h"

namespace chute {

class ForkMark {
 public:
  ForkMark();
  // True in a process forked after this mark was taken (from the process that took it, or a child of it).
  bool in_child() const;
  // kCancelled: "this <what> was made in process P before fork(); ...", for calls made in a child.
  Status child_error(const std::string& what) const;

 private:
  uint64_t forks_;
  pid_t pid_;
};

}  // namespace chute
