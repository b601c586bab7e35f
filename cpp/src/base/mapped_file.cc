#include "chute/base/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <cstring>
#include <mutex>

#include "chute/base/environment.h"

namespace chute {
namespace {

// --- SIGBUS: a mapped file that shrank under its reader ---------------------------------------------
// A read of a page past the end of a file truncated after mmap raises SIGBUS. copy() reads under a guard:
// the handler jumps back to it and the read becomes an error. Any other SIGBUS inside a chute mapping (an
// in-place read of an index) is still fatal, but the handler first names the file; then it hands the
// signal on to the handler it replaced, or to the default action.

// Set while this thread copies out of a mapping. volatile, and fenced in guarded_copy(): the compiler must
// neither drop nor move the stores around the copy, which it may see as unrelated to them.
thread_local sigjmp_buf* volatile t_guard = nullptr;

// The live mappings, for the fatal message: a fixed table read by the handler without locks.
constexpr int kMaxMappings = 4096;
struct MappingEntry {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<const char*> path{nullptr};
};
MappingEntry g_mappings[kMaxMappings];

int register_mapping(const uint8_t* data, size_t size, const char* path) {
  for (int i = 0; i < kMaxMappings; ++i) {
    uintptr_t expected = 0;
    if (g_mappings[i].begin.compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(data))) {
      g_mappings[i].path.store(path);
      g_mappings[i].end.store(reinterpret_cast<uintptr_t>(data) + size);
      return i;
    }
  }
  return -1;  // the table is full: that mapping's fatal message will not name it
}

void unregister_mapping(int slot) {
  if (slot < 0) return;
  g_mappings[slot].end.store(0);
  g_mappings[slot].path.store(nullptr);
  g_mappings[slot].begin.store(0);
}

void write_stderr(const char* s) {
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

struct sigaction g_previous;  // the handler ours replaced
std::mutex g_install_mu;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* const guard = t_guard) {
    t_guard = nullptr;
    siglongjmp(*guard, 1);
  }
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const MappingEntry& m : g_mappings) {
    const uintptr_t begin = m.begin.load(std::memory_order_relaxed), end = m.end.load(std::memory_order_relaxed);
    const char* path = m.path.load(std::memory_order_relaxed);
    if (begin != 0 && addr >= begin && addr < end && path != nullptr) {
      write_stderr("chute: fatal SIGBUS reading ");
      write_stderr(path);
      write_stderr(
          ": the file shrank (was truncated or rewritten in place) while chute had it mapped. chute "
          "replaces the files it writes by renaming, never in place; restart the job once the file "
          "is complete.\n");
      break;
    }
  }
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);  // returning re-runs the faulting access: the default action, a core dump
}

// Installs on_sigbus unless it is the current handler (someone, e.g. torch's DataLoader worker setup, may
// have installed theirs since); theirs is then called for faults outside a guarded copy.
void ensure_sigbus_handler() {
  struct sigaction current;
  if (::sigaction(SIGBUS, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
      current.sa_sigaction == on_sigbus)
    return;
  std::lock_guard<std::mutex> lock(g_install_mu);
  struct sigaction ours {};
  ours.sa_sigaction = on_sigbus;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&ours.sa_mask);
  struct sigaction previous;
  if (::sigaction(SIGBUS, &ours, &previous) != 0) return;
  if (!((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction == on_sigbus)) g_previous = previous;
}

// Copies with the guard set; false when a page was gone. Nothing with a destructor lives in here, so the
// jump out of the handler skips no cleanup.
bool guarded_copy(uint8_t* dst, const uint8_t* src, size_t n) {
  sigjmp_buf guard;
  if (sigsetjmp(guard, /*savemask=*/1) != 0) return false;  // SIGBUS: t_guard was cleared by the handler
  t_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
  return true;
}

}  // namespace

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "cannot open " + path);  // EMFILE & co.: kEnvironment
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("cannot map " + path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  file->mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  file->inode_ = static_cast<uint64_t>(st.st_ino);
  file->ctime_ns_ = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return errno_status(err, "cannot map " + path);  // ENOMEM (`ulimit -v`, vm.max_map_count): kEnvironment
    }
    file->data_ = static_cast<const uint8_t*>(p);
    ensure_sigbus_handler();
    file->registry_slot_ = register_mapping(file->data_, file->size_, file->path_.c_str());
  }
  ::close(fd);  // the mapping keeps the file
  return std::shared_ptr<const MappedFile>(std::move(file));
}

Status MappedFile::copy(uint64_t offset, size_t n, uint8_t* dst) const {
  CHUTE_CHECK(offset <= size_ && n <= size_ - offset);
  if (n == 0) return Status::ok();
  ensure_sigbus_handler();
  if (guarded_copy(dst, data_ + offset, n)) return Status::ok();
  struct stat st;
  const std::string now =
      ::stat(path_.c_str(), &st) == 0 ? ", and is " + std::to_string(st.st_size) + " bytes now" : "";
  return io_error(path_ + " shrank while in use: " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                  " are gone (the file was " + std::to_string(size_) + " bytes when opened" + now +
                  "; truncated or rewritten in place?)");
}

MappedFile::~MappedFile() {
  unregister_mapping(registry_slot_);
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace chute
