/*
 * lock: the sleeping half of lock.h's futex mutex. A contended acquire spins LOCK_SPIN_LIMIT
 * pause loops (a holder in a short critical section lets go within them), then marks the lock
 * contended (2) and sleeps on the futex until a release wakes it; the release that finds the
 * mark wakes one sleeper. The calling thread's count of held locks (lock_held_here) is lock.h's.
 * A contended acquire counts itself and the time it waited once it holds the lock (lock.h's
 * statistics): the clock is read only here.
 */
#include "lock.h"
#include "os.h"

#define LOCK_SPIN_LIMIT 100 /* pause loops before a contended lock sleeps */

__thread unsigned lock_held_here;

/* Called with l held: one contended acquisition that began at start. */
static void lock_count_wait(lock_t *l, uint64_t start) {
  STAT_ADD(l->contended, 1);
  STAT_ADD(l->wait_ns, os_clock_ns() - start);
}

void lock_acquire_slow(lock_t *l) {
  uint64_t start = os_clock_ns();
  for (int i = 0; i < LOCK_SPIN_LIMIT; i++) {
    __builtin_ia32_pause();
    if (__atomic_load_n(&l->state, __ATOMIC_RELAXED) == 0 && lock_take(l)) {
      lock_count_wait(l, start);
      return;
    }
  }
  while (__atomic_exchange_n(&l->state, 2, __ATOMIC_ACQUIRE) != 0)
    os_futex_wait(&l->state, 2);
  lock_count_wait(l, start);
}

void lock_wait_free(lock_t *l) {
  for (int i = 0; i < LOCK_SPIN_LIMIT; i++) {
    if (__atomic_load_n(&l->state, __ATOMIC_RELAXED) == 0) return;
    __builtin_ia32_pause();
  }
  lock_acquire(l); /* a holder that long may be preempted: queue as a waiter does */
  lock_release(l);
}

void lock_acquire_settled(lock_t *l, const unsigned *pending) {
  lock_acquire(l);
  while (*pending) {
    lock_release(l);
    os_sleep_ms(1);
    lock_acquire(l);
  }
}

void lock_release_wake(lock_t *l) {
  os_futex_wake(&l->state, 1);
}
