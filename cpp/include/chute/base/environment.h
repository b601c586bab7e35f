// Environment failures: the machine talking, not the sample.
//
// Out of file descriptors (EMFILE, ENFILE), memory (ENOMEM, std::bad_alloc), threads or kernel buffers
// (EAGAIN, ENOBUFS), an interrupted call (EINTR) or a storage failure that may pass (EIO, ETIMEDOUT,
// ESTALE on a network mount) says nothing about the sample being read. Such a failure is retried with
// backoff (retry_environment()); if it outlasts the retries it is a StatusCode::kEnvironment error that
// names the limit to raise. The loader never skips or quarantines a kEnvironment error: it ends the epoch
// whatever the error policy, and Python raises chute.ResourceError.
// Thread-safety: plain functions.
#pragma once

#include <string>

#include "chute/base/status.h"

namespace chute {

// Whether errno `err` is a failure of the machine rather than of the file being read.
bool is_environment_errno(int err);

// What limit `err` hit and how to raise it, e.g. "the per-process limit on open files (raise it with
// `ulimit -n`)"; empty for an errno that is no limit.
std::string environment_hint(int err);

// The Status for a failed system call on a sample's file: kEnvironment with the limit named for the
// errnos above, kNotFound for ENOENT, kIoError otherwise. `what` says what failed ("cannot open").
Status errno_status(int err, const std::string& what);

// An allocation of `bytes` (0: unknown) that failed: kEnvironment, naming memory limits.
Status out_of_memory(const std::string& what, size_t bytes = 0);

// Attempts before an environment failure is reported, and the first wait between them (doubled each time:
// 10, 20, 40, 80, 160 ms; about 0.3 s in all).
inline constexpr int kEnvironmentAttempts = 6;
inline constexpr int kEnvironmentFirstBackoffMs = 10;

// Sleeps before retry number `attempt` (1-based).
void environment_backoff(int attempt);

// Runs `attempt` (returning Status) until it returns anything but kEnvironment, at most
// kEnvironmentAttempts times with backoff between tries; returns the last Status (a kEnvironment one
// says how many attempts failed).
template <typename F>
Status retry_environment(F&& attempt) {
  Status st = attempt();
  for (int i = 1; i < kEnvironmentAttempts && st.code() == StatusCode::kEnvironment; ++i) {
    environment_backoff(i);
    st = attempt();
  }
  if (st.code() != StatusCode::kEnvironment) return st;
  return environment_error(st.message() + " [" + std::to_string(kEnvironmentAttempts) + " attempts over about " +
                           std::to_string(kEnvironmentFirstBackoffMs * ((1 << (kEnvironmentAttempts - 1)) - 1)) +
                           " ms]");
}

}  // namespace chute
