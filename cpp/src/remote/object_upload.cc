// ObjectStore's writes: put() and the atomic Upload, for S3/GCS (multipart) and local files (a temporary
// renamed into place).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>

#include "chute/base/environment.h"
#include "chute/remote/object_store.h"

namespace chute {

namespace {

Status write_all(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "cannot write '" + path + "'");
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

// A local file written beside its final name and renamed over it on commit (atomic on one filesystem).
class LocalUpload final : public Upload {
 public:
  static Result<std::unique_ptr<Upload>> begin(const std::string& path) {
    static std::atomic<uint64_t> counter{0};
    const std::string temp =
        path + ".chute-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno_status(errno, "cannot create '" + temp + "'");
    return std::unique_ptr<Upload>(new LocalUpload(path, temp, fd));
  }
  ~LocalUpload() override { (void)abort(); }

  Status write(std::span<const uint8_t> bytes) override {
    if (fd_ < 0) return invalid_argument("'" + path_ + "': write() after commit() or abort()");
    CHUTE_RETURN_IF_ERROR(write_all(fd_, bytes, temp_));
    written_ += bytes.size();
    return Status::ok();
  }
  Status commit() override {
    if (fd_ < 0) return invalid_argument("'" + path_ + "': commit() after commit() or abort()");
    Status st;
    if (::fsync(fd_) != 0) st = errno_status(errno, "cannot flush '" + temp_ + "'");
    if (::close(fd_) != 0 && st.is_ok()) st = errno_status(errno, "cannot close '" + temp_ + "'");
    fd_ = -1;
    if (st.is_ok() && std::rename(temp_.c_str(), path_.c_str()) != 0) {
      st = errno_status(errno, "cannot rename '" + temp_ + "' to '" + path_ + "'");
    }
    if (!st.is_ok()) ::unlink(temp_.c_str());
    return st;
  }
  Status abort() override {
    if (fd_ < 0) return Status::ok();
    ::close(fd_);
    fd_ = -1;
    ::unlink(temp_.c_str());
    return Status::ok();
  }
  uint64_t bytes_written() const override { return written_; }

 private:
  LocalUpload(std::string path, std::string temp, int fd) : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  std::string path_, temp_;
  int fd_;
  uint64_t written_ = 0;
};

}  // namespace

// An S3 multipart upload, started when the first part fills (an object smaller than one part is a single
// PutObject at commit). A failed request aborts the upload, so that no part is left behind.
class S3Upload final : public Upload {
 public:
  S3Upload(std::shared_ptr<const ObjectStore> store, S3Bucket bucket, std::string key, std::string url,
           uint64_t part_bytes, int parts_in_flight)
      : store_(std::move(store)),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        url_(std::move(url)),
        part_bytes_(part_bytes),
        parts_in_flight_(parts_in_flight),
        parts_(std::make_shared<Parts>()) {}
  ~S3Upload() override { (void)abort(); }

  Status write(std::span<const uint8_t> bytes) override {
    if (state_ != State::kOpen) return invalid_argument(url_ + ": write() after commit() or abort()");
    while (!bytes.empty()) {
      const size_t take = std::min<size_t>(bytes.size(), part_bytes_ - buffer_.size());
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + static_cast<long>(take));
      bytes = bytes.subspan(take);
      written_ += take;
      if (buffer_.size() == part_bytes_) CHUTE_RETURN_IF_ERROR(or_abort(upload_part()));
    }
    return Status::ok();
  }

  Status commit() override {
    if (state_ != State::kOpen) return invalid_argument(url_ + ": commit() after commit() or abort()");
    if (upload_id_.empty()) {  // smaller than one part: one PutObject, atomic by itself
      const Status st = store_->fetch(s3_put_object(bucket_, key_, std::move(buffer_)), "PUT " + url_).status();
      state_ = st.is_ok() ? State::kCommitted : State::kAborted;
      return st;
    }
    if (!buffer_.empty()) CHUTE_RETURN_IF_ERROR(or_abort(upload_part()));
    CHUTE_RETURN_IF_ERROR(or_abort(wait_for_parts(0)));
    std::vector<CompletedPart> parts;
    for (auto& [number, etag] : parts_->etags) parts.push_back({number, etag});  // in order: a std::map
    const std::string what = "COMPLETE " + url_;
    Result<HttpResponse> response = store_->fetch(s3_complete_multipart_upload(bucket_, key_, upload_id_, parts), what);
    Status st = response.status();
    if (st.is_ok()) {
      st = check_complete_multipart(
          std::string_view(reinterpret_cast<const char*>(response->body.data()), response->body.size()), what);
    }
    CHUTE_RETURN_IF_ERROR(or_abort(st));
    state_ = State::kCommitted;
    return Status::ok();
  }

  Status abort() override {
    if (state_ != State::kOpen) return Status::ok();
    state_ = State::kAborted;
    buffer_.clear();
    if (upload_id_.empty()) return Status::ok();
    (void)wait_for_parts(0);  // a part still in flight would otherwise land after the abort
    return store_->fetch(s3_abort_multipart_upload(bucket_, key_, upload_id_), "ABORT " + url_).status();
  }

  uint64_t bytes_written() const override { return written_; }

 private:
  enum class State { kOpen, kCommitted, kAborted };

  // A failed step: abort what was uploaded, report the step's error.
  Status or_abort(Status st) {
    if (!st.is_ok()) (void)abort();
    return st;
  }

  Status upload_part() {
    if (upload_id_.empty()) {
      const std::string what = "CREATE UPLOAD " + url_;
      CHUTE_ASSIGN_OR_RETURN(HttpResponse created, store_->fetch(s3_create_multipart_upload(bucket_, key_), what));
      CHUTE_ASSIGN_OR_RETURN(
          upload_id_,
          parse_upload_id(std::string_view(reinterpret_cast<const char*>(created.body.data()), created.body.size()),
                          what));
    }
    CHUTE_RETURN_IF_ERROR(wait_for_parts(parts_in_flight_ - 1));
    const int number = ++parts_started_;
    if (number > 10000) return invalid_argument(url_ + ": more than S3's 10000 parts (raise part_bytes)");
    std::vector<uint8_t> body;
    body.swap(buffer_);
    buffer_.reserve(part_bytes_);
    {
      std::lock_guard lock(parts_->mu);
      ++parts_->in_flight;
    }
    // Sent without waiting: the caller fills the next part meanwhile. The callback holds the shared state
    // only, never this Upload.
    store_->engine()->submit(
        s3_upload_part(bucket_, key_, upload_id_, number, std::move(body)),
        [parts = parts_, number,
         what = "PUT " + url_ + " (part " + std::to_string(number) + ")"](Result<HttpResponse> response) {
          Result<std::string> etag =
              response.is_ok()
                  ? parse_part_etag(response.value(), what)
                  : Result<std::string>(Status(response.status().code(), what + ": " + response.status().message()));
          std::lock_guard lock(parts->mu);
          --parts->in_flight;
          if (etag.is_ok()) {
            parts->etags[number] = std::move(etag).value();
          } else if (parts->error.is_ok()) {
            parts->error = etag.status();
          }
          parts->done.notify_all();
        });
    return Status::ok();
  }

  // Waits until at most `max_in_flight` parts are in flight; the first part's error, if one failed.
  Status wait_for_parts(int max_in_flight) {
    std::unique_lock lock(parts_->mu);
    parts_->done.wait(lock, [&] { return parts_->in_flight <= max_in_flight; });
    return parts_->error;
  }

  // Shared with the callbacks of parts in flight.
  struct Parts {
    std::mutex mu;
    std::condition_variable done;
    int in_flight = 0;
    std::map<int, std::string> etags;  // part number -> ETag
    Status error;                      // the first failure
  };

  std::shared_ptr<const ObjectStore> store_;  // kept alive while the upload is
  S3Bucket bucket_;
  std::string key_, url_;
  uint64_t part_bytes_;
  std::vector<uint8_t> buffer_;
  int parts_in_flight_;
  std::shared_ptr<Parts> parts_;
  int parts_started_ = 0;
  std::string upload_id_;
  State state_ = State::kOpen;
  uint64_t written_ = 0;
};

Result<std::unique_ptr<Upload>> ObjectStore::begin_upload(std::string_view url) const {
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(url));
  if (!parsed.remote()) return LocalUpload::begin(parsed.path);
  if (!parsed.bucket_store()) {
    return unsupported(single_quoted(object_display_name(url)) +
                       ": chute writes to s3://, gs:// and local paths, not http(s)");
  }
  if (parsed.key.empty() || parsed.key.back() == '/') {
    return invalid_argument(single_quoted(url) + " names a bucket or a prefix, not an object");
  }
  CHUTE_ASSIGN_OR_RETURN(S3Bucket b, bucket(parsed));
  return std::unique_ptr<Upload>(new S3Upload(shared_from_this(), std::move(b), parsed.key, std::string(url),
                                              options_.part_bytes, options_.parts_in_flight));
}

Status ObjectStore::put(std::string_view url, std::span<const uint8_t> bytes) const {
  CHUTE_ASSIGN_OR_RETURN(ObjectUrl parsed, parse_object_url(url));
  if (!parsed.bucket_store()) {  // local: a temporary renamed into place; http(s): begin_upload() says no
    CHUTE_ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload, begin_upload(url));
    CHUTE_RETURN_IF_ERROR(upload->write(bytes));
    return upload->commit();
  }
  if (parsed.key.empty() || parsed.key.back() == '/') {
    return invalid_argument(single_quoted(url) + " names a bucket or a prefix, not an object");
  }
  CHUTE_ASSIGN_OR_RETURN(S3Bucket b, bucket(parsed));
  // One request whatever the size (S3 takes up to 5 GiB in one PUT); an object appears whole or not at all.
  return fetch(s3_put_object(b, parsed.key, std::vector<uint8_t>(bytes.begin(), bytes.end())),
               "PUT " + std::string(url))
      .status();
}

}  // namespace chute
