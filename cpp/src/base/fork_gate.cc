#include "chute/base/fork_gate.h"

#include <pthread.h>

#include <atomic>

namespace chute {
namespace {

// The gate. `active` counts threads inside a Work (each thread once, however deeply nested); `forking`
// counts forks being prepared (two threads may fork at once). Entering is one increment and one load when no fork is
// pending: a thread increments, then looks; the forker sets `forking`, then looks at the count. With sequentially
// consistent operations one of them sees the other, so no thread starts work unseen by a fork.
std::atomic<int> g_active{0};
std::atomic<int> g_forking{0};
std::atomic<int64_t> g_forks_waited{0};
// Only for the slow paths: a thread waiting for a fork to finish, the forker waiting for work to end.
// Plain pthread objects, re-initialised in the child (a thread of the parent may have held or waited on
// them at the fork).
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

thread_local int t_depth = 0;  // this thread's nesting of Work

void leave_gate() {
  if (g_active.fetch_sub(1) == 1 && g_forking.load() != 0) {
    pthread_mutex_lock(&g_mu);
    pthread_cond_broadcast(&g_cv);  // the forker waits for the count to reach zero
    pthread_mutex_unlock(&g_mu);
  }
}

void enter_gate() {
  for (;;) {
    g_active.fetch_add(1);
    if (g_forking.load() == 0) return;
    leave_gate();  // a fork is being prepared: step back, and wait outside holding nothing
    pthread_mutex_lock(&g_mu);
    while (g_forking.load() != 0) pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
  }
}

void prepare() {
  const int own = t_depth > 0 ? 1 : 0;  // a thread that forks inside its own Work waits for the others only
  pthread_mutex_lock(&g_mu);
  g_forking.fetch_add(1);
  if (g_active.load() > own) g_forks_waited.fetch_add(1, std::memory_order_relaxed);
  while (g_active.load() > own) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

void in_parent() {
  pthread_mutex_lock(&g_mu);
  if (g_forking.fetch_sub(1) == 1) pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

void in_child() {
  // The parent's threads do not exist here: whatever they held or waited on is gone with them.
  pthread_mutex_init(&g_mu, nullptr);
  pthread_cond_init(&g_cv, nullptr);
  g_active.store(t_depth > 0 ? 1 : 0);
  g_forking.store(0);
}

// Registered when the library is loaded, before any chute thread can exist.
[[maybe_unused]] const int g_installed = pthread_atfork(prepare, in_parent, in_child);

}  // namespace

ForkGate::Work::Work() {
  if (t_depth++ == 0) enter_gate();
}

ForkGate::Work::~Work() {
  if (--t_depth == 0) leave_gate();
}

ForkGate::Pause::Pause() : depth_(t_depth) {
  if (depth_ == 0) return;
  t_depth = 0;
  leave_gate();
}

ForkGate::Pause::~Pause() {
  if (depth_ == 0) return;
  enter_gate();
  t_depth = depth_;
}

bool ForkGate::fork_pending() { return g_forking.load() != 0; }

int64_t ForkGate::forks_waited() { return g_forks_waited.load(std::memory_order_relaxed); }

}  // namespace chute
