#include "chute/remote/object_fetch.h"

#include <algorithm>

#include "chute/base/thread.h"
#include "chute/remote/cached_object.h"

namespace chute {

Result<std::unique_ptr<ObjectFetch>> ObjectFetch::start(std::shared_ptr<ObjectStore> store,
                                                        std::shared_ptr<ShardCache> cache,
                                                        std::vector<std::string> urls, Options options) {
  if (options.threads < 1) return invalid_argument("object fetch: threads must be at least 1");
  auto f = std::unique_ptr<ObjectFetch>(new ObjectFetch());
  f->store_ = std::move(store);
  f->cache_ = std::move(cache);
  f->urls_ = std::move(urls);
  f->paths_.resize(f->urls_.size());
  f->cancel_ = CancelToken::make(CancelScope::current());
  const int count = static_cast<int>(std::min<size_t>(f->urls_.size(), static_cast<size_t>(options.threads)));
  ObjectFetch* p = f.get();
  // Counted before they start: a thread that ends at once must not find running_ at zero for the others.
  f->running_ = count;
  const Status started = start_threads(
      "chute-fetch", 0, count, [p](int) { p->fetch_loop(); }, f->threads_);
  if (!started.is_ok()) {
    std::lock_guard<std::mutex> lock(f->mu_);
    f->running_ -= count - static_cast<int>(f->threads_.size());  // those never started
    if (f->threads_.empty()) return started;
  }
  return f;
}

ObjectFetch::~ObjectFetch() {
  cancel();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void ObjectFetch::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stop_ && (next_ < urls_.size() || running_ > 0)) cancelled_ = true;  // objects were left unfetched
  stop_ = true;
  cancel_->cancel();  // downloads in flight end within ~0.1 s, whatever the server does
}

Result<std::string> ObjectFetch::fetch(const std::string& url) const {
  CHUTE_ASSIGN_OR_RETURN(CachedObject object, cache_object(*store_, *cache_, url));
  return object.file->path();
}

void ObjectFetch::fetch_loop() {
  CancelScope scope(cancel_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && next_ < urls_.size()) {
    const size_t i = next_++;
    lock.unlock();
    Result<std::string> path = fetch(urls_[i]);
    lock.lock();
    if (path.is_ok()) {
      paths_[i] = std::move(path).value();
    } else if (failed_.is_ok() && !cancelled_) {
      failed_ = path.status();
      stop_ = true;  // the dataset cannot open: the other objects are not worth fetching
    }
  }
  if (--running_ == 0) done_.notify_all();
}

Result<std::vector<std::string>> ObjectFetch::wait(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!done_.wait_for(lock, timeout, [&] { return running_ == 0; }))
      return Status(StatusCode::kDeadlineExceeded, "object fetch: still running");
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return Status(StatusCode::kCancelled, "object fetch: cancelled");
  if (!failed_.is_ok()) return failed_;
  return paths_;
}

}  // namespace chute
