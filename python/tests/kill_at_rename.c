// LD_PRELOAD shim for test_pack_destination.py: the Nth rename() of the process ($CHUTE_KILL_AT_RENAME) kills
// it with SIGKILL instead of renaming, as kill -9 or a crash between two renames would. Every other call
// passes through to libc. chute's AtomicFile renames through the plain rename symbol, which this interposes
// (the test compiles it: cc -shared -fPIC -o libkill_at_rename.so kill_at_rename.c -ldl).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int (*real_rename)(const char*, const char*);
static long kill_at = -1;  // the rename that kills; -1: none
static long renames;

__attribute__((constructor)) static void init(void) {
  real_rename = dlsym(RTLD_NEXT, "rename");
  if (getenv("CHUTE_KILL_AT_RENAME")) kill_at = atol(getenv("CHUTE_KILL_AT_RENAME"));
}

int rename(const char* from, const char* to) {
  if (__atomic_add_fetch(&renames, 1, __ATOMIC_RELAXED) == kill_at) kill(getpid(), SIGKILL);
  return real_rename(from, to);
}
