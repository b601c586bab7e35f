// LD_PRELOAD shim for the bad-input tests: read() fails with EIO on every file descriptor opened from the
// paths in $CHUTE_FAULTY_READ (separated by ':'), as it does on a failing disk or a broken network mount. Everything else
// passes through to libc. $CHUTE_FAULTY_ERRNO picks another errno (a number), and $CHUTE_FAULTY_TIMES makes
// only the first N faulty reads of the process fail (a transient failure); unset, every one fails. chute's ImageFolder calls the plain open/read/close symbols, which this
// interposes (bad_inputs.py compiles it: cc -shared -fPIC -o libfaulty_read.so faulty_read.c -ldl).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { kMaxFd = 1 << 16 };
static unsigned char faulty[kMaxFd];  // fd -> opened from the faulty path
static int (*real_open)(const char*, int, ...);
static ssize_t (*real_read)(int, void*, size_t);
static int (*real_close)(int);
static const char* target;
static int fault_errno = EIO;
static long fault_times = -1;  // faults left; -1: unlimited

__attribute__((constructor)) static void init(void) {
  real_open = dlsym(RTLD_NEXT, "open");
  real_read = dlsym(RTLD_NEXT, "read");
  real_close = dlsym(RTLD_NEXT, "close");
  target = getenv("CHUTE_FAULTY_READ");
  if (getenv("CHUTE_FAULTY_ERRNO")) fault_errno = atoi(getenv("CHUTE_FAULTY_ERRNO"));
  if (getenv("CHUTE_FAULTY_TIMES")) fault_times = atol(getenv("CHUTE_FAULTY_TIMES"));
}

// Whether this faulty read fails: always, or while faults are left.
static int take_fault(void) {
  long left = __atomic_load_n(&fault_times, __ATOMIC_RELAXED);
  while (left != -1) {
    if (left == 0) return 0;
    if (__atomic_compare_exchange_n(&fault_times, &left, left - 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return 1;
  }
  return 1;
}

static int is_target(const char* path) {
  const size_t n = strlen(path);
  for (const char* p = target; p != NULL && *p != '\0';) {
    const char* end = strchr(p, ':');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, path, n) == 0) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  const int fd = real_open(path, flags, mode);
  if (fd >= 0 && fd < kMaxFd) __atomic_store_n(&faulty[fd], is_target(path), __ATOMIC_RELAXED);
  return fd;
}

ssize_t read(int fd, void* buf, size_t n) {
  if (fd >= 0 && fd < kMaxFd && __atomic_load_n(&faulty[fd], __ATOMIC_RELAXED) && take_fault()) {
    errno = fault_errno;
    return -1;
  }
  return real_read(fd, buf, n);
}

int close(int fd) {
  if (fd >= 0 && fd < kMaxFd) __atomic_store_n(&faulty[fd], 0, __ATOMIC_RELAXED);
  return real_close(fd);
}
