// Cancellation of blocking work: a CancelToken shared by whoever may cancel and the work it started.
//
// Who cancels: a Python binding when Ctrl-C arrives during a call (bindings.h, call_interruptibly), the
// loader when it ends an epoch or closes (its reads of that epoch), ShardStream when it is destroyed (its
// prefetches), HttpEngine::download/receive after their first failure (their other ranges).
// Who watches: the HTTP engine's requests (each ends kCancelled within ~0.1 s of its token being
// cancelled, in flight, queued or backing off between retries), the shard cache's wait for another
// filler's lock, and any loop that checks CancelScope::cancelled().
//
// The work finds its token through the calling thread's scope: a CancelScope installs a token as the
// thread's current one for its lifetime, so that a wait deep inside a call (an HTTP request inside
// ObjectStore::stat() inside PackedSource::open_remote()) watches it without every signature on the way
// carrying it, as a thread's signal mask or errno travel. A thread that starts other threads for the same
// work hands them CancelScope::current() (they install it themselves). A thread with no scope is never
// cancelled.
//
// A token may have a parent: it is cancelled when its parent is (a download's own token under its
// caller's), never the reverse.
// Thread-safety: cancel() and cancelled() from any thread; a CancelScope belongs to its thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "chute/base/status.h"

namespace chute {

class CancelToken {
 public:
  // A new token; with `parent`, cancelled also when the parent is.
  static std::shared_ptr<CancelToken> make(std::shared_ptr<const CancelToken> parent = nullptr);
  void cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const {
    return cancelled_.load(std::memory_order_acquire) || (parent_ != nullptr && parent_->cancelled());
  }

 private:
  explicit CancelToken(std::shared_ptr<const CancelToken> parent) : parent_(std::move(parent)) {}
  std::atomic<bool> cancelled_{false};
  const std::shared_ptr<const CancelToken> parent_;
};

// Makes `token` the calling thread's current token until the scope ends (then the previous one again).
class CancelScope {
 public:
  explicit CancelScope(std::shared_ptr<const CancelToken> token);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

  // The calling thread's current token; nullptr outside any scope.
  static const std::shared_ptr<const CancelToken>& current();
  // Whether the calling thread's current token is cancelled.
  static bool cancelled() {
    const auto& t = current();
    return t != nullptr && t->cancelled();
  }

 private:
  std::shared_ptr<const CancelToken> previous_;
};

// The kCancelled status for `what` ("GET <url>", "waiting for the lock <path>"): "<what>: cancelled".
Status cancelled_error(const std::string& what);

}  // namespace chute
