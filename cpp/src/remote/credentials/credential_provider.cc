#include "chute/remote/credential_provider.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "chute/base/cancel.h"
#include "chute/base/environment.h"
#include "remote/credentials/credential_sources.h"

namespace chute {
namespace {

using SysClock = std::chrono::system_clock;
using namespace std::chrono_literals;

constexpr auto kRefreshBefore = 10min;  // temporary credentials are fetched again this long before expiry
constexpr auto kRefreshRetry = 30s;     // ... at most this often while they are still valid
constexpr auto kExpiredRetry = 1s;      // ... and this often once they have expired (or none came yet)
constexpr auto kFeedWait = 60s;         // the longest wait for the feeder's first answer
constexpr auto kWaitSlice = 100ms;      // waits look at the calling thread's cancellation this often

enum Source { kWebIdentity = 0, kContainer = 1, kInstanceMetadata = 2 };

bool expired(const AwsCredentials& c, SysClock::time_point now) { return c.expiration && *c.expiration <= now; }

std::string utc_text(SysClock::time_point t) {
  const time_t s = SysClock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

bool credentials_refresh_due(std::optional<SysClock::time_point> expiration, SysClock::time_point now,
                             SysClock::time_point last_attempt) {
  if (!expiration) return false;
  if (*expiration <= now) return now - last_attempt >= kExpiredRetry;
  return *expiration - now <= kRefreshBefore && now - last_attempt >= kRefreshRetry;
}

// ---- CredentialFeed ------------------------------------------------------------------------------

Result<std::shared_ptr<CredentialFeed>> CredentialFeed::create() {
  std::shared_ptr<CredentialFeed> feed(new CredentialFeed());
  if (::pipe2(feed->pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return errno_status(errno, "credential feed: pipe");
  return feed;
}

CredentialFeed::~CredentialFeed() {
  for (int fd : pipe_)
    if (fd >= 0) ::close(fd);
}

void CredentialFeed::wake() {
  const char byte = 1;
  while (::write(pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }  // EAGAIN: the pipe is full of wake-ups already
}

bool CredentialFeed::take_wanted() {
  std::lock_guard<std::mutex> lock(mu_);
  char drain[64];
  while (::read(pipe_[0], drain, sizeof drain) > 0) {
  }
  if (closed_ || !wanted_) return false;
  wanted_ = false;
  return true;
}

void CredentialFeed::push(AwsCredentials credentials) {
  std::lock_guard<std::mutex> lock(mu_);
  credentials_ = std::move(credentials);
  tried_.clear();
  error_.clear();
  pushed_ = true;
  cv_.notify_all();
}

void CredentialFeed::push_none(std::string tried) {
  std::lock_guard<std::mutex> lock(mu_);
  credentials_.reset();
  tried_ = std::move(tried);
  error_.clear();
  pushed_ = true;
  cv_.notify_all();
}

void CredentialFeed::push_error(std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::move(error);
  pushed_ = true;
  cv_.notify_all();
}

bool CredentialFeed::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void CredentialFeed::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  wake();
}

std::optional<AwsCredentials> CredentialFeed::peek(bool* pushed) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pushed != nullptr) *pushed = pushed_;
  return credentials_;
}

std::string CredentialFeed::tried() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tried_;
}

Result<std::optional<AwsCredentials>> CredentialFeed::get(std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!pushed_) {
    wanted_ = true;
    wake();
    const auto deadline = std::chrono::steady_clock::now() + max_wait;
    while (!pushed_) {
      if (CancelScope::cancelled()) return cancelled_error("waiting for credentials from botocore");
      if (std::chrono::steady_clock::now() >= deadline) {
        return environment_error("no credentials from botocore within " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(max_wait).count()) +
                                 " s (chute.credentials resolves them on a thread of its own)");
      }
      cv_.wait_for(lock, kWaitSlice);
    }
  }
  if (!error_.empty()) {
    const std::string error = error_;
    error_.clear();
    pushed_ = credentials_.has_value() || !tried_.empty();  // ask again; meanwhile keep what came before
    wanted_ = true;
    wake();
    return io_error("credentials from botocore: " + error);
  }
  return credentials_;
}

// ---- CredentialProvider --------------------------------------------------------------------------

struct CredentialProvider::Found {
  std::optional<AwsCredentials> credentials;
  int source = -1;
  std::string tried;  // when none was found
};

std::shared_ptr<CredentialProvider> CredentialProvider::create(const S3Config& config,
                                                               std::shared_ptr<HttpEngine> engine, FileReader read_file,
                                                               std::shared_ptr<CredentialFeed> feed) {
  std::shared_ptr<CredentialProvider> p(new CredentialProvider());
  if (feed != nullptr) {
    p->feed_ = std::move(feed);
  } else if (!config.anonymous()) {
    p->has_fixed_ = true;
    p->fixed_ = AwsCredentials{config.access_key, config.secret_key, config.session_token, std::nullopt, config.source};
  }
  p->sources_ = config.sources;
  p->engine_ = std::move(engine);
  p->read_file_ = std::move(read_file);
  p->tried_before_ = config.tried;
  return p;
}

CredentialProvider::~CredentialProvider() {
  if (feed_ != nullptr) feed_->close();
}

std::string CredentialProvider::tried() const {
  if (feed_ != nullptr) {
    const std::string t = feed_->tried();
    return "botocore's credential chain (environment, shared credentials and config files, SSO, "
           "credential_process, assume-role profiles, web identity, container and instance roles) found none" +
           (t.empty() ? std::string() : ": " + t);
  }
  std::lock_guard<std::mutex> lock(mu_);
  return tried_.empty() ? tried_before_ : tried_;
}

std::optional<AwsCredentials> CredentialProvider::peek(bool* known) const {
  if (has_fixed_ || engine_ == nullptr) {
    if (known != nullptr) *known = true;
    return fixed_;
  }
  if (feed_ != nullptr) return feed_->peek(known);
  std::lock_guard<std::mutex> lock(mu_);
  if (known != nullptr) *known = resolved_;
  return credentials_;
}

Result<CredentialProvider::Found> CredentialProvider::walk_sources() {
  Found found;
  std::string tried = tried_before_;
  const auto add = [&](const std::string& s) { tried += (tried.empty() ? "" : ", ") + s; };
  if (!sources_.web_identity_token_file.empty()) {
    CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, detail::fetch_web_identity(*engine_, sources_, read_file_));
    return Found{std::move(c), kWebIdentity, {}};
  }
  add("web identity (AWS_WEB_IDENTITY_TOKEN_FILE unset)");
  if (!sources_.container_url.empty()) {
    CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, detail::fetch_container_credentials(*engine_, sources_, read_file_));
    return Found{std::move(c), kContainer, {}};
  }
  add("container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset)");
  if (sources_.instance_metadata) {
    std::string why;
    CHUTE_ASSIGN_OR_RETURN(std::optional<AwsCredentials> c, detail::fetch_instance_metadata(*engine_, sources_, &why));
    if (c) return Found{std::move(c), kInstanceMetadata, {}};
    add("instance metadata at " + sources_.instance_metadata_endpoint + " (" + why + ")");
  } else {
    add("instance metadata (AWS_EC2_METADATA_DISABLED=true)");
  }
  found.tried = std::move(tried);
  return found;
}

Result<std::optional<AwsCredentials>> CredentialProvider::current() {
  if (has_fixed_) return fixed_;
  if (feed_ != nullptr) return feed_->get(kFeedWait);
  if (engine_ == nullptr) return std::optional<AwsCredentials>();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const SysClock::time_point now = SysClock::now();
    const bool usable = credentials_ && !expired(*credentials_, now);
    if (resolved_ && !credentials_) return std::optional<AwsCredentials>();  // none anywhere: anonymous
    const bool due = resolved_ ? credentials_refresh_due(credentials_->expiration, now, last_attempt_)
                               : last_error_.is_ok() || now - last_attempt_ >= kExpiredRetry;
    if (!due) {
      if (usable) return credentials_;
      if (!resolved_) return last_error_;
      return environment_error("the credentials from " + credentials_->source + " expired at " +
                               utc_text(*credentials_->expiration) + " and could not be refreshed" +
                               (last_error_.is_ok() ? std::string() : ": " + last_error_.message()));
    }
    if (!refreshing_) break;
    if (usable) return credentials_;  // another thread refreshes them; these are still good
    if (CancelScope::cancelled()) return cancelled_error("waiting for credentials");
    cv_.wait_for(lock, kWaitSlice);
  }
  return refresh(lock);
}

Result<std::optional<AwsCredentials>> CredentialProvider::refresh(std::unique_lock<std::mutex>& lock) {
  refreshing_ = true;
  const SysClock::time_point attempt = SysClock::now();
  const bool resolved = resolved_;
  const int source = source_;
  lock.unlock();
  Result<Found> found = [&]() -> Result<Found> {
    if (!resolved) return walk_sources();
    switch (source) {  // again from the source that gave them
      case kWebIdentity: {
        CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, detail::fetch_web_identity(*engine_, sources_, read_file_));
        return Found{std::move(c), source, {}};
      }
      case kContainer: {
        CHUTE_ASSIGN_OR_RETURN(AwsCredentials c, detail::fetch_container_credentials(*engine_, sources_, read_file_));
        return Found{std::move(c), source, {}};
      }
      default: {
        std::string why;
        CHUTE_ASSIGN_OR_RETURN(std::optional<AwsCredentials> c,
                               detail::fetch_instance_metadata(*engine_, sources_, &why));
        if (!c) return io_error("instance metadata at " + sources_.instance_metadata_endpoint + ": " + why);
        return Found{std::move(c), source, {}};
      }
    }
  }();
  lock.lock();
  refreshing_ = false;
  cv_.notify_all();
  if (!found.is_ok()) {
    // A cancelled attempt says nothing about the source: the next caller tries at once.
    if (found.status().code() != StatusCode::kCancelled) {
      last_attempt_ = attempt;
      last_error_ = found.status();
    }
    if (credentials_ && !expired(*credentials_, SysClock::now())) return credentials_;
    return found.status();
  }
  last_attempt_ = attempt;
  last_error_ = Status::ok();
  resolved_ = true;
  source_ = found->source;
  credentials_ = std::move(found->credentials);
  if (!credentials_) tried_ = std::move(found->tried);
  return credentials_;
}

}  // namespace chute
