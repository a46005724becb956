/*
 * lock: a three-state futex mutex (0 free, 1 held, 2 held with waiters). Uncontended acquire
 * and release are one atomic each; contended waiters spin briefly, then sleep in the kernel.
 * lock_try lets callers count contention (the depot grows its magazines on it). After fork the
 * child re-initialises every lock with lock_init: the parent's holders do not exist there.
 */
#ifndef MAGPIE_LOCK_H
#define MAGPIE_LOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct lock {
  uint32_t state; /* accessed only through __atomic builtins */
} lock_t;

#define LOCK_INIT                                                                                  \
  { 0 }

void lock_acquire_slow(lock_t *l);
void lock_release_wake(lock_t *l);

static inline void lock_init(lock_t *l) {
  __atomic_store_n(&l->state, 0, __ATOMIC_RELAXED);
}

static inline bool lock_try(lock_t *l) {
  uint32_t expected = 0;
  return __atomic_compare_exchange_n(&l->state, &expected, 1, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED);
}

static inline void lock_acquire(lock_t *l) {
  if (!lock_try(l)) lock_acquire_slow(l);
}

static inline void lock_release(lock_t *l) {
  if (__atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2) lock_release_wake(l);
}

#endif
