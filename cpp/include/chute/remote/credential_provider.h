// CredentialProvider: the AWS credentials that sign s3:// requests now. They come from the configuration's
// keys, from the temporary credentials a cloud job has (web identity, container, instance role), or from a
// feed outside the core (botocore, through the Python package), and are refreshed before they expire.
//
// Native sources, without a feed (credentials.h says how each is configured), first one that answers wins,
// tried at the first signed request (never at ObjectStore::create(): a job that reads only https:// does
// not ask the instance metadata service):
//   1. keys from the environment or the profile: fixed;
//   2. web identity (EKS IRSA): AssumeRoleWithWebIdentity at STS with the token file's current token;
//   3. container credentials (ECS, EKS Pod Identity): a GET of the container URL;
//   4. instance metadata (EC2 instance role), IMDSv2: a session token (PUT /latest/api/token), the role
//      (GET /latest/meta-data/iam/security-credentials/) and its credentials (GET .../<role>);
//   5. none: anonymous, and tried() names every source and why it gave nothing (a 403's message says it).
// A configured source that fails (STS refuses the token, the container endpoint errs) is an error, as in
// botocore, never a silent fall to anonymous; an instance metadata service that does not answer within its
// timeout, or that has no role attached, is "none".
//
// Refresh: temporary credentials are fetched again, from the source that gave them, once fewer than 10
// minutes remain (at most every 30 s while they are valid, every second once they have expired); a failed
// refresh keeps the credentials until they expire, then is the request's error. One thread refreshes at a
// time; the others use the credentials while they are valid, or wait for it (cancellably).
//
// The feed: when botocore is installed, the Python package resolves credentials through it (its whole
// chain: environment, profiles, SSO, credential_process, assume-role profiles, web identity, container and
// instance roles) on a thread of its own that waits for the provider to ask, then pushes them, and again
// whenever botocore refreshes them. The provider never calls into Python (a native thread that waited on
// the GIL could deadlock a destructor that holds it).
//
// Thread-safety: current() and tried() from any thread; each side of a CredentialFeed from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "chute/base/status.h"
#include "chute/remote/credentials.h"
#include "chute/remote/http_engine.h"

namespace chute {

struct AwsCredentials {
  std::string access_key, secret_key, session_token;
  std::optional<std::chrono::system_clock::time_point> expiration;  // none: they do not expire
  std::string source;  // for messages: "environment", "instance metadata (role r)", "botocore (iam-role)"
};

// A mailbox between a CredentialProvider (which asks and reads) and a feeder outside the core (which waits
// to be asked and pushes). The feeder waits on a descriptor (poll/select), not in a call of this class: a
// Python daemon thread blocked inside a native call would be ended inside it when the interpreter exits
// (pthread_exit, through C++ frames), where a wait in select() ends cleanly.
class CredentialFeed {
 public:
  static Result<std::shared_ptr<CredentialFeed>> create();  // kEnvironment when no pipe can be made
  ~CredentialFeed();
  CredentialFeed(const CredentialFeed&) = delete;
  CredentialFeed& operator=(const CredentialFeed&) = delete;

  // The feeder's side. wait_fd() becomes readable when the provider asks, or when it is gone (closed());
  // take_wanted() then says whether it asked (and takes the ask).
  int wait_fd() const { return pipe_[0]; }
  bool take_wanted();
  void push(AwsCredentials credentials);
  void push_none(std::string tried);   // none found: anonymous
  void push_error(std::string error);  // resolving them failed: the requests that need them fail so
  bool closed() const;

  // The provider's side. The last push; waits up to `max_wait` for the first (ending early, kCancelled, when
  // the calling thread's CancelScope is cancelled). After an error, the next call asks again.
  Result<std::optional<AwsCredentials>> get(std::chrono::milliseconds max_wait);
  std::string tried() const;
  void close();
  // The last push, without asking or waiting; *pushed (optional) says whether anything came yet.
  std::optional<AwsCredentials> peek(bool* pushed = nullptr) const;

 private:
  CredentialFeed() = default;
  void wake();  // makes wait_fd() readable; called with mu_ held
  int pipe_[2] = {-1, -1};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, closed_ = false, pushed_ = false;
  std::optional<AwsCredentials> credentials_;
  std::string tried_, error_;
};

class CredentialProvider {
 public:
  // The provider for s3:// requests under `config`: its keys when it has them; else the feed when given;
  // else the native sources, fetched through `engine`. `read_file` reads token files.
  static std::shared_ptr<CredentialProvider> create(const S3Config& config, std::shared_ptr<HttpEngine> engine,
                                                    FileReader read_file, std::shared_ptr<CredentialFeed> feed);
  ~CredentialProvider();  // closes the feed: its feeder stops
  CredentialProvider(const CredentialProvider&) = delete;
  CredentialProvider& operator=(const CredentialProvider&) = delete;

  // The credentials to sign with now; std::nullopt: none (requests go unsigned). An error when a source
  // that is configured fails, or the credentials expired and cannot be refreshed.
  Result<std::optional<AwsCredentials>> current();
  // When current() found none: every source tried, and why each gave nothing.
  std::string tried() const;
  // The credentials held now, without fetching any; *known (optional) is false while none were fetched
  // yet (temporary ones are, at the first signed request).
  std::optional<AwsCredentials> peek(bool* known = nullptr) const;

 private:
  CredentialProvider() = default;
  struct Found;
  Result<Found> walk_sources();  // the first source that answers, or none
  Result<std::optional<AwsCredentials>> refresh(std::unique_lock<std::mutex>& lock);

  std::optional<AwsCredentials> fixed_;  // keys from the configuration
  bool has_fixed_ = false;
  std::shared_ptr<CredentialFeed> feed_;
  CredentialSources sources_;
  std::shared_ptr<HttpEngine> engine_;
  FileReader read_file_;
  std::string tried_before_;  // what the configuration's resolution looked at

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool refreshing_ = false;
  bool resolved_ = false;  // a source was found, or none at all (anonymous)
  int source_ = -1;        // the source that gave the credentials
  std::optional<AwsCredentials> credentials_;
  std::string tried_;
  Status last_error_;
  std::chrono::system_clock::time_point last_attempt_{};
};

// The refresh policy above, as a pure function: whether credentials expiring at `expiration` should be
// fetched again at `now`, the last attempt having been at `last_attempt`.
bool credentials_refresh_due(std::optional<std::chrono::system_clock::time_point> expiration,
                             std::chrono::system_clock::time_point now,
                             std::chrono::system_clock::time_point last_attempt);

}  // namespace chute
