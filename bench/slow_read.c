// LD_PRELOAD shim for bench/doctor_planted.py's storage case: read() on a file whose path starts with
// $CHUTE_SLOW_READ_PREFIX first sleeps $CHUTE_SLOW_READ_MS milliseconds, as a network filesystem's round trip
// does. Both chute's ImageFolder and Python's file objects call the plain open/read/close symbols.
// Build: cc -shared -fPIC -O2 -o libslow_read.so slow_read.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

enum { kMaxFd = 1 << 16 };
static unsigned char slow[kMaxFd];  // fd -> opened under the prefix
static int (*real_open)(const char*, int, ...);
static int (*real_open64)(const char*, int, ...);
static ssize_t (*real_read)(int, void*, size_t);
static int (*real_close)(int);
static const char* prefix;
static struct timespec delay;

__attribute__((constructor)) static void init(void) {
  real_open = dlsym(RTLD_NEXT, "open");
  real_open64 = dlsym(RTLD_NEXT, "open64");
  real_read = dlsym(RTLD_NEXT, "read");
  real_close = dlsym(RTLD_NEXT, "close");
  prefix = getenv("CHUTE_SLOW_READ_PREFIX");
  const char* ms = getenv("CHUTE_SLOW_READ_MS");
  const long n = ms ? atol(ms) : 0;
  delay.tv_sec = n / 1000;
  delay.tv_nsec = (n % 1000) * 1000000L;
}

static int mark(const char* path, int fd) {
  if (fd >= 0 && fd < kMaxFd) slow[fd] = prefix && *prefix && strncmp(path, prefix, strlen(prefix)) == 0;
  return fd;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return mark(path, real_open(path, flags, mode));
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return mark(path, (real_open64 ? real_open64 : real_open)(path, flags, mode));
}

ssize_t read(int fd, void* buf, size_t count) {
  if (fd >= 0 && fd < kMaxFd && slow[fd]) nanosleep(&delay, NULL);
  return real_read(fd, buf, count);
}

int close(int fd) {
  if (fd >= 0 && fd < kMaxFd) slow[fd] = 0;
  return real_close(fd);
}
