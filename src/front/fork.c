/*
 * fork: keeping magpie whole across fork(). The one place that registers fork handlers, and
 * the one written lock order of the allocator.
 *
 * Theory
 *   1. The prepare handler takes every lock of magpie in the order below, so the child starts
 *      with consistent structures; the parent releases them in reverse; the child re-initialises
 *      them (the holders of the parent's locks do not exist there) and keeps only the cache of
 *      the thread that forked (caches.c, mag.c).
 *   2. stdio first. glibc's fork takes stdio's list lock after running the prepare handlers,
 *      and a thread in getline holds its FILE's lock while it allocates, while fflush(NULL)
 *      holds the list lock and waits for that FILE. Taking magpie's locks first would close a
 *      cycle (fork -> list lock -> FILE -> magpie -> fork), so prepare takes the list lock
 *      before them, wherever glibc's fork will take it too (os_stdio_lock).
 *   3. Fork from a signal handler. A single-threaded program may fork in a handler (POSIX), and
 *      the handler may have interrupted the allocator with one of its locks held: prepare would
 *      wait for its own thread. When the forking thread holds any magpie lock (lock_held_here),
 *      the handlers take and reset nothing: the child is a copy of a process interrupted inside
 *      the allocator, in which, as POSIX says of any child forked from a handler, only
 *      async-signal-safe functions may be called. This holds whether or not magpie's own
 *      background thread runs (it makes a program of one thread two).
 *   4. The handlers are registered from the library constructor, when malloc already works
 *      (pthread_atfork allocates).
 *
 * Lock order. A thread that holds a lock of this list takes only locks further down it:
 *    1. stdio's list lock (glibc's; magpie takes it only here)
 *    2. stats_lock (stats.c)
 *    3. debug mode: debug_verify_lock, debug_report_lock, debug_lock (src/debug/)
 *    4. sample_lock (sample.c), then prof_lock (prof.c)
 *    5. cache_list_lock (caches.c)
 *    6. mag_registry_lock, then a tcache's lock or a CPU's magazine lock (mag.c, mag_percpu.c)
 *    7. a cache's depot lock, then its slab lock (depot.c, slab.c)
 *    8. the slab arena's lock, then the heap arena's (hugepage.c, vmem.c)
 *    9. meta_pools_lock, then a metadata pool's lock (meta.c)
 * Locks of one level are taken together only by fork: CPUs by number, caches in cache_for_all's
 * order, pools in list order. Thread caches' own locks are not taken by fork: the child keeps
 * only its own and re-initialises it.
 */
#include "caches.h"
#include "debug.h"
#include "lock.h"
#include "os.h"
#include "prof.h"
#include "sample.h"
#include "stats.h"

#include <pthread.h>
#include <stdbool.h>

static __thread bool fork_untouched; /* this fork came from inside the allocator (theory 3) */
static __thread bool fork_stdio_locked;

static void fork_prepare(void) {
  fork_untouched = lock_held_here != 0;
  if (fork_untouched) return;
  fork_stdio_locked = os_stdio_lock();
  stats_fork_prepare();
  if (debug_on) debug_fork_prepare();
  sample_fork_prepare();
  prof_fork_prepare();
  cache_fork_prepare();
}

static void fork_parent(void) {
  if (fork_untouched) return;
  cache_fork_parent();
  prof_fork_parent();
  sample_fork_parent();
  if (debug_on) debug_fork_parent();
  stats_fork_parent();
  if (fork_stdio_locked) os_stdio_unlock();
}

static void fork_child(void) {
  if (fork_untouched) return;
  cache_fork_child();
  prof_fork_child();
  sample_fork_child();
  if (debug_on) debug_fork_child();
  stats_fork_child();
  lock_held_here = 0; /* every lock prepare took was re-initialised; glibc resets stdio's */
}

void fork_handlers_register(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}
