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
 *      async-signal-safe functions may be called. glibc's own part of fork is safe in a
 *      handler only while the process has run one thread: otherwise it holds its atfork lock
 *      from after the last prepare handler to the first parent or child handler, and a handler
 *      that forks inside that window waits for it forever. So magpie starts no thread of its
 *      own in a program that has run none (caches.c theory 3, populate.c), unless the live
 *      view (publish_ms) or option reaper=2 asks for it.
 *   4. Forks nest. The handler may also interrupt the program's own fork() between its prepare
 *      and its parent or child handlers, while prepare holds every lock (so the inner fork takes
 *      nothing), or while they take or let go of them. What a fork decided in prepare is
 *      therefore kept per fork, on a small per-thread stack (fork_frames): prepare pushes a
 *      frame, the parent or child handler pops it, and an inner fork, which runs whole between
 *      two instructions of the outer one, pushes and pops above it. Each step is ordered so that
 *      an inner fork may land between any two: prepare fills the frame before it counts it,
 *      parent and child copy their frame before they drop it. An inner fork that lands where
 *      this thread holds no magpie lock (before prepare's first lock, after the parent's last
 *      release or the child's reset) is a whole fork: lock_held_here rises before a lock is
 *      taken and falls after it is let go, so it never reads 0 while one is held, and the
 *      inner fork leaves every lock and the count as it found them. Forks nested deeper than
 *      FORK_NESTING_MAX (one more signal handler each) take nothing, like case 3.
 *   5. The handlers are registered from the library constructor, when malloc already works
 *      (pthread_atfork allocates).
 *   6. Pages go back to the kernel between two holds of a slab lock or an arena's lock (slab.c
 *      theory 6, vmem.c theory 10). Prepare takes those locks once no such work is in flight
 *      (lock_acquire_settled): the child would keep it half done, with nobody to finish it. The
 *      thread doing it counts as holding a lock throughout (lock_pending_begin), so that a fork
 *      from a signal handler that interrupts it takes nothing (theory 3) instead of waiting for
 *      the thread it interrupted.
 *
 * Lock order. A thread that holds a lock of this list takes only locks further down it:
 *    1. stdio's list lock (glibc's; magpie takes it only here)
 *    2. stats_lock (stats.c)
 *    3. debug mode: debug_verify_lock, debug_report_lock, debug_lock (src/debug/)
 *    4. sample_lock (sample.c), then prof_lock (prof.c)
 *    5. cache_reap_lock (caches.c: one reap at a time), then cache_list_lock (caches.c)
 *    6. mag_registry_lock, then a tcache's lock or a CPU's magazine lock (mag.c, mag_percpu.c)
 *    7. a cache's depot lock, then its slab lock (depot.c, slab.c)
 *    8. a span stash's lock (slab.c theory 9: only ever tried; fork takes none, the child frees
 *       them), then the slab arena's lock, then the heap arena's (hugepage.c, vmem.c)
 *    9. meta_pools_lock, then a metadata pool's lock (meta.c)
 * Locks of one level are taken together only by fork: CPUs by number, caches in cache_for_all's
 * order, pools in list order. Thread caches' own locks are not taken by fork: the child keeps
 * only its own and re-initialises it.
 */
#include "caches.h"
#include "debug.h"
#include "inject.h"
#include "lock.h"
#include "os.h"
#include "prof.h"
#include "sample.h"
#include "stats.h"

#include <pthread.h>
#include <stdbool.h>

/* Forks one thread may have under way at once: the program's, and one per signal handler that
   interrupts the one below it (theory 4). */
#define FORK_NESTING_MAX 16

/* What one fork's prepare decided, for its parent or child handler. */
typedef struct fork_frame {
  bool untouched;    /* the forking thread held a magpie lock: nothing taken (theory 3) */
  bool stdio_locked; /* prepare took stdio's list lock */
} fork_frame_t;

/* The forks under way on this thread, innermost last; only this thread and its signal handlers
   touch them, and a handler's fork returns them as it found them. */
static __thread fork_frame_t fork_frames[FORK_NESTING_MAX];
static __thread unsigned fork_depth; /* frames in use (may exceed the array: those take nothing) */

/* Keeps the compiler from moving a frame's stores or loads across a change of fork_depth, as a
   signal handler on this thread would see them. */
static inline void fork_fence(void) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* Pushes this fork's frame. An inner fork landing before the push ends leaves fork_depth as it
   found it and writes only at or above it, and the frame is filled before it is counted. */
static fork_frame_t *fork_push(bool untouched) {
  unsigned depth = fork_depth;
  fork_frame_t *frame = depth < FORK_NESTING_MAX ? &fork_frames[depth] : NULL;
  if (frame) *frame = (fork_frame_t){.untouched = untouched, .stdio_locked = false};
  fork_fence();
  fork_depth = depth + 1;
  fork_fence();
  return frame;
}

/* Pops this fork's frame and returns a copy, taken before the pop so that an inner fork landing
   after it may reuse the slot. */
static fork_frame_t fork_pop(void) {
  unsigned depth = fork_depth - 1;
  fork_frame_t frame = {.untouched = true, .stdio_locked = false};
  if (depth < FORK_NESTING_MAX) frame = fork_frames[depth];
  fork_fence();
  fork_depth = depth;
  fork_fence();
  return frame;
}

static void fork_prepare(void) {
  /* An inner fork between this read and the push leaves lock_held_here as it found it. */
  bool held = lock_held_here != 0;
  fork_frame_t *frame = fork_push(held);
  if (!frame || frame->untouched) return;
  frame->stdio_locked = os_stdio_lock();
  stats_fork_prepare();
  if (debug_on) debug_fork_prepare();
  sample_fork_prepare();
  prof_fork_prepare();
  cache_fork_prepare();
  INJECT_LOCK_FORGET(); /* the test build: the fork's copy-on-write faults are not a holder's */
}

static void fork_parent(void) {
  fork_frame_t frame = fork_pop();
  if (frame.untouched) return;
  cache_fork_parent();
  prof_fork_parent();
  sample_fork_parent();
  if (debug_on) debug_fork_parent();
  stats_fork_parent();
  if (frame.stdio_locked) os_stdio_unlock();
}

static void fork_child(void) {
  fork_frame_t frame = fork_pop();
  if (frame.untouched) return;
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
