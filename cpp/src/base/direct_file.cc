#include "chute/base/direct_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "chute/base/environment.h"

namespace chute {
namespace {

// The block holding a head's partial end and the tail, aligned for O_DIRECT: 2 blocks hold
// (kDirectBlock - 1) + kMaxDirectTail bytes, rounded up.
constexpr size_t kBounce = 2 * kDirectBlock;
uint8_t* bounce() {
  alignas(kDirectBlock) static thread_local uint8_t block[kBounce];
  return block;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kDirectBlock == 0; }

size_t round_up(size_t n) { return (n + kDirectBlock - 1) / kDirectBlock * kDirectBlock; }

// Opens with O_DIRECT when the file system allows it; *direct says which it got.
int open_maybe_direct(const std::string& path, int flags, bool want, bool* direct) {
  if (want) {
    const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EINVAL) {
      *direct = fd >= 0;
      return fd;
    }
    if (flags & O_CREAT) ::unlink(path.c_str());  // EINVAL after creating it: start again without O_DIRECT
  }
  *direct = false;
  return ::open(path.c_str(), flags | O_CLOEXEC, 0644);
}

Status write_at(int fd, const uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  for (size_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(fd, data + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return errno_status(w < 0 ? errno : EIO, "cannot write " + path);
    done += static_cast<size_t>(w);
  }
  return Status::ok();
}

// Reads up to n bytes at offset; the count read (less at the end of the file).
Result<size_t> read_at(int fd, uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, data + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_status(errno, "cannot read " + path);
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

Status write_file_direct(const std::string& path, std::span<const uint8_t> head, std::span<const uint8_t> tail) {
  if (tail.size() > kMaxDirectTail) return invalid_argument("write_file_direct: a tail over 4 KiB");
  bool direct = false;
  Fd fd(open_maybe_direct(path, O_WRONLY | O_CREAT | O_EXCL, aligned(head.data()), &direct));
  if (fd.get() < 0) return errno_status(errno, "cannot create " + path);
  const size_t bulk = direct ? head.size() / kDirectBlock * kDirectBlock : head.size();
  CHUTE_RETURN_IF_ERROR(write_at(fd.get(), head.data(), bulk, 0, path));
  const size_t rest = head.size() - bulk, end = rest + tail.size();
  if (direct) {
    // The head's last partial block and the tail, padded to whole blocks, then cut back to their size.
    uint8_t* b = bounce();
    if (rest > 0) std::memcpy(b, head.data() + bulk, rest);
    if (!tail.empty()) std::memcpy(b + rest, tail.data(), tail.size());  // an empty span's data() may be null
    std::memset(b + end, 0, round_up(end) - end);
    CHUTE_RETURN_IF_ERROR(write_at(fd.get(), b, round_up(end), bulk, path));
    if (::ftruncate(fd.get(), static_cast<off_t>(head.size() + tail.size())) != 0)
      return errno_status(errno, "cannot write " + path);
  } else {
    CHUTE_RETURN_IF_ERROR(write_at(fd.get(), tail.data(), tail.size(), head.size(), path));
  }
  if (::close(fd.release()) != 0) return errno_status(errno, "cannot write " + path);
  return Status::ok();
}

Result<bool> read_file_direct(const std::string& path, std::span<uint8_t> head, std::span<uint8_t> tail) {
  if (tail.size() > kMaxDirectTail) return invalid_argument("read_file_direct: a tail over 4 KiB");
  bool direct = false;
  Fd fd(open_maybe_direct(path, O_RDONLY, aligned(head.data()), &direct));
  if (fd.get() < 0) {
    if (errno == ENOENT) return false;
    return errno_status(errno, "cannot open " + path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "cannot stat " + path);
  if (static_cast<uint64_t>(st.st_size) != head.size() + tail.size()) return false;
  const size_t bulk = direct ? head.size() / kDirectBlock * kDirectBlock : head.size();
  CHUTE_ASSIGN_OR_RETURN(size_t got, read_at(fd.get(), head.data(), bulk, 0, path));
  const size_t rest = head.size() - bulk, end = rest + tail.size();
  if (direct) {
    uint8_t* b = bounce();
    CHUTE_ASSIGN_OR_RETURN(size_t more, read_at(fd.get(), b, round_up(end), bulk, path));
    if (got != bulk || more != end) return false;  // it shrank meanwhile
    if (rest > 0) std::memcpy(head.data() + bulk, b, rest);
    if (!tail.empty()) std::memcpy(tail.data(), b + rest, tail.size());
    return true;
  }
  CHUTE_ASSIGN_OR_RETURN(size_t more, read_at(fd.get(), tail.data(), tail.size(), head.size(), path));
  return got == bulk && more == tail.size();
}

}  // namespace chute
