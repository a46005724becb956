/*
 * lock: a three-state futex mutex (0 free, 1 held, 2 held with waiters). Uncontended acquire
 * and release are one atomic each; contended waiters spin briefly, then sleep in the kernel.
 * lock_try lets callers count contention (the depot grows its magazines on it). After fork the
 * child re-initialises every lock with lock_init: the parent's holders do not exist there.
 * Each thread counts the locks it holds (lock_held_here): a fork from a signal handler that
 * interrupted the allocator must not wait for a lock its own thread holds (fork.c).
 */
#ifndef MAGPIE_LOCK_H
#define MAGPIE_LOCK_H

#include "san_hooks.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lock {
  uint32_t state; /* accessed only through __atomic builtins */
} lock_t;

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
    return true;
  }
  lock_count(-1);
  return false;
}

static inline void lock_acquire(lock_t *l) {
  lock_count(1);
  if (!lock_take(l)) lock_acquire_slow(l);
  san_lock_taken(l); /* a sanitized program's TSan sees magpie's locks (san_hooks.h) */
}

static inline void lock_release(lock_t *l) {
  san_lock_releasing(l);
  if (__atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2) lock_release_wake(l);
  lock_count(-1);
}

#endif
