// ForkGate: chute's native threads stand still while the process forks.
//
// fork() copies the whole address space but only the calling thread. A lock that another thread held at
// that moment stays locked in the child forever: a library's internal lock (libwebp's one-time set-up,
// the C++ runtime's static-initialisation guard, an unwinder's lock, libcurl's or its TLS library's), and
// the child hangs the first time it needs that library. torch's DataLoader forks its workers while chute's
// threads may be running (a validation loader on chute's engine beside a training loader with workers, a
// user's own fork), so chute makes its threads safe across any fork, whoever calls it, instead of asking
// the caller to avoid fork.
//
// Every stretch of a chute thread's work that runs library code (a sample's read, decode and resize, a
// gather's copies, a batch's mix, a pack's record, the HTTP engine's turn) holds a ForkGate::Work. A
// pthread_atfork prepare handler closes the gate and waits until no thread holds it; threads that want to
// start work meanwhile wait outside, holding nothing. The fork then happens while every chute thread is
// either idle (waiting on a condition variable of its own engine, which the child never touches: ForkMark
// makes engines inert there) or parked at the gate. The parent's handler reopens the gate; the child's
// makes a fresh one (no thread of the parent's exists there).
//
// Rules for code inside a Work: never wait for something only another thread's Work can provide without
// stepping out (ForkGate::Pause: a remote shard's download, a decode budget held by other decodes), never
// take the GIL (the forking thread holds it while it waits here), and never sleep (retries back off
// outside their Work). A fork waits at most for the longest stretch in progress: one sample's decode.
//
// Thread-safety: Work and Pause are per-thread RAII guards (nesting is allowed); fork() may be called from
// any thread, including one inside a Work (the gate then waits for the others only).
#pragma once

#include <cstdint>

namespace chute {

class ForkGate {
 public:
  // Held while the calling thread runs library code: a fork waits until it ends; none starts while a fork
  // is being prepared.
  class Work {
   public:
    Work();
    ~Work();
    Work(const Work&) = delete;
    Work& operator=(const Work&) = delete;
  };
  // Inside a Work, around a wait for another thread: the fork need not wait for this one meanwhile.
  class Pause {
   public:
    Pause();
    ~Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    int depth_;
  };

  // Whether a fork is being prepared now (its prepare handler waits for Work in progress). For tests, and
  // for a long stretch of work that would rather step out than make the fork wait.
  static bool fork_pending();
  // Forks that had to wait for Work in progress, over the process's life (a test's evidence).
  static int64_t forks_waited();
};

}  // namespace chute
