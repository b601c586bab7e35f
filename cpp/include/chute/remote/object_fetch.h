// ObjectFetch: remote objects fetched whole into the node's ShardCache, several at once, for a dataset
// whose objects must all be local before it opens (tar shards: a tar's members are known only by reading
// it). Each object is taken from the cache, or downloaded into it, in one version (cached_object.h: keyed
// by URL, ETag and size; an object replaced at the same URL, even mid-download, is fetched anew).
//
// Threads: up to `threads` (never more than the objects), named "chute-fetch", started by start(); a
// thread the kernel refuses is an error only when none started. They take the objects in order and end
// when every object is done, after the first failure, or after cancel().
// Cancellation: after cancel() no further object starts and the downloads in flight end within ~0.1 s
// (their threads watch this fetch's CancelToken, a child of the starting thread's CancelScope; cancel.h),
// then wait() returns kCancelled. The destructor cancels and joins.
// Thread-safety: cancel() from any thread; wait() from one thread at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chute/base/cancel.h"
#include "chute/base/status.h"
#include "chute/remote/object_store.h"
#include "chute/remote/shard_cache.h"

namespace chute {

class ObjectFetch {
 public:
  struct Options {
    int threads = 8;  // objects fetched at once (each download is itself many ranged requests in flight)
  };
  static Result<std::unique_ptr<ObjectFetch>> start(std::shared_ptr<ObjectStore> store,
                                                    std::shared_ptr<ShardCache> cache, std::vector<std::string> urls,
                                                    Options options);
  ~ObjectFetch();
  ObjectFetch(const ObjectFetch&) = delete;
  ObjectFetch& operator=(const ObjectFetch&) = delete;

  // Once every thread has ended: the objects' local paths (their cache entries), in the order of the URLs;
  // the first failure (naming its object); or kCancelled. kDeadlineExceeded while they run past `timeout`.
  Result<std::vector<std::string>> wait(std::chrono::milliseconds timeout);
  // No object starts from now on.
  void cancel();

 private:
  ObjectFetch() = default;
  void fetch_loop();
  Result<std::string> fetch(const std::string& url) const;

  std::shared_ptr<ObjectStore> store_;
  std::shared_ptr<ShardCache> cache_;
  std::vector<std::string> urls_;
  std::vector<std::string> paths_;

  std::mutex mu_;
  std::condition_variable done_;
  size_t next_ = 0;    // the next object to start
  int running_ = 0;    // threads that have not ended
  bool stop_ = false;  // cancel(), or a failure: start nothing more
  bool cancelled_ = false;
  std::shared_ptr<CancelToken> cancel_;  // the threads' scope
  Status failed_;                        // the first failure
  std::vector<std::thread> threads_;
};

}  // namespace chute
