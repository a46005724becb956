/*
 * lock: a three-state futex mutex (0 free, 1 held, 2 held with waiters). Uncontended acquire
 * and release are one atomic each; contended waiters spin briefly, then sleep in the kernel.
 * lock_try lets callers count contention (the depot grows its magazines on it). After fork the
 * child re-initialises every lock with lock_init: the parent's holders do not exist there.
 * Each thread counts the locks it holds (lock_held_here): a fork from a signal handler that
 * interrupted the allocator must not wait for a lock its own thread holds (fork.c).
 * Statistics: each lock counts its acquisitions with a plain increment made while holding it;
 * the contended ones (those that reach lock_acquire_slow) and the time they waited are counted
 * there only, so only a contended acquisition reads the clock. Reports read the counts without
 * the lock (STAT_READ): a count a moment stale is harmless.
 */
#ifndef MAGPIE_LOCK_H
#define MAGPIE_LOCK_H

#include "inject.h"
#include "san_hooks.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * Counters written only by their owner (a thread, or the holder of a lock) and read by reports
 * from any thread. Release builds use plain word-sized stores (an aligned 64-bit store is never
 * torn on the machines magpie supports, and a report reading a stale count is harmless);
 * sanitizer builds use relaxed atomics so that ThreadSanitizer checks everything else without
 * this known race.
 */
#ifdef MAGPIE_SANITIZED
#define STAT_ADD(field, n)                                                                         \
  __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (n), __ATOMIC_RELAXED)
#else
#define STAT_ADD(field, n) ((field) += (n))
#endif
#define STAT_READ(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

typedef struct lock {
  uint32_t state;        /* accessed only through __atomic builtins */
  uint64_t acquisitions; /* times taken (written by the holder) */
  uint64_t contended;    /* acquisitions that found the lock held (written by the holder) */
  uint64_t wait_ns;      /* time those waited, in ns (written by the holder) */
} lock_t;

/* A lock's counters, as a report reads them. */
typedef struct lock_stats {
  uint64_t acquisitions, contended, wait_ns;
} lock_stats_t;

#define LOCK_INIT                                                                                  \
  { 0 }

extern __thread unsigned lock_held_here; /* locks the calling thread holds or waits for */

void lock_acquire_slow(lock_t *l); /* returns with l held */
void lock_release_wake(lock_t *l);

static inline void lock_init(lock_t *l) {
  __atomic_store_n(&l->state, 0, __ATOMIC_RELAXED);
}

/* One attempt, uncounted: 0 -> 1. */
static inline bool lock_take(lock_t *l) {
  uint32_t expected = 0;
  return __atomic_compare_exchange_n(&l->state, &expected, 1, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED);
}

/* The count covers every instant the lock is held: it rises before the lock is taken and
   falls after it is released, in program order as a signal handler on this thread sees it. */
static inline void lock_count(int delta) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  lock_held_here += (unsigned)delta;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline bool lock_try(lock_t *l) {
  lock_count(1);
  if (lock_take(l)) {
    san_lock_taken(l);
    STAT_ADD(l->acquisitions, 1);
    INJECT_LOCK_TAKEN(l);
    return true;
  }
  lock_count(-1);
  return false;
}

static inline void lock_acquire(lock_t *l) {
  lock_count(1);
  if (!lock_take(l)) lock_acquire_slow(l);
  san_lock_taken(l); /* a sanitized program's TSan sees magpie's locks (san_hooks.h) */
  STAT_ADD(l->acquisitions, 1);
  INJECT_LOCK_TAKEN(l);
}

/* Returns once l was seen free, without taking it where its holder lets go within a short
   spin (a caller that will take it next then takes it once, not twice). */
void lock_wait_free(lock_t *l);

/* Takes l once *pending, which changes only under l, is zero: work that let go of l halfway
   needs l to finish (pages given back outside an arena's or a slab layer's lock). fork's
   prepare handler takes such locks so: the child would keep that work half done. */
void lock_acquire_settled(lock_t *l, const unsigned *pending);

/* Such work begins (ends), l held, by adding n to (taking n from) its pending count: from then
   on the calling thread counts as holding a lock, with l let go too, so that a fork from a
   signal handler that interrupts the work takes nothing (fork.c theory 3) instead of waiting in
   lock_acquire_settled for the very thread it interrupted. */
static inline void lock_pending_begin(unsigned *pending, unsigned n) {
  *pending += n;
  lock_count(1);
}

static inline void lock_pending_end(unsigned *pending, unsigned n) {
  *pending -= n;
  lock_count(-1);
}

/* Adds l's counters to sum (without the lock). */
static inline void lock_stats_add(lock_stats_t *sum, const lock_t *l) {
  sum->acquisitions += STAT_READ(l->acquisitions);
  sum->contended += STAT_READ(l->contended);
  sum->wait_ns += STAT_READ(l->wait_ns);
}

static inline void lock_release(lock_t *l) {
  INJECT_LOCK_RELEASED(l);
  san_lock_releasing(l);
  if (__atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2) lock_release_wake(l);
  lock_count(-1);
}

#endif
