/*
 * mag_reclaim: the reaper's side of the magazine layer. At each reap (front/caches.c, at most
 * once per reap_ms) the CPUs (mag_percpu.c) and threads that have not missed since the last
 * one give their magazines of malloc's classes to the depots, the loaded ones too; malloc_trim
 * and an allocation that found no memory take them from every CPU and thread, missing or not,
 * so that no free block stays out of reach while memory is short. Object caches' magazines
 * stay (mag_slots.c).
 *
 * Theory: taking the loaded magazines of a thread that works on them without a lock.
 *   1. The owner marks its lock-free work on its own pairs (tc->busy, between fast_enter and
 *      fast_leave, mag_fast.h), and trades the loaded magazine for the previous one only there
 *      and never with the sentinel loaded (mag_own_trade, mag.c theory 8).
 *   2. Under the thread's lock, which keeps its slow paths out, the reaper parks each loaded
 *      magazine: it exchanges the sentinel (MAG_TOP_NONE, mag.h) in for its top and keeps the top
 *      it held, which gives the count (mag_thread_park). The previous magazines stay in place: the
 * owner may be trading them.
 *   3. One membarrier for a batch of parked threads orders each thread's store of busy before
 *      its load of the loaded magazine against the reaper's exchange (an asymmetric fence).
 *   4. After it, a thread whose busy is clear either finished with the parked magazines or
 *      will see the sentinel. Where the sentinel is still loaded, the parked and previous
 *      magazines are the reaper's, and the parked top gives the magazine's count; where it is
 *      not, the owner stored its top (or traded) in the window, and that top and pair are the
 *      current ones, so they stay. A busy thread gets its parked tops back where the sentinel
 *      is still loaded (mag_thread_settle).
 *   5. Without membarrier, or under ThreadSanitizer, which cannot see the fence's ordering,
 *      threads keep their magazines until they exit or trim.
 * Locking: mag_registry_lock, then up to MAG_PARK_BATCH threads' locks at once, held until the
 * batch is settled (front/fork.c writes the order). A reap takes a thread's lock only where it
 * is free: its holder is in a slow path, which a thread that missed takes, and may be
 * preempted there, and every reap after would wait with it. Trim and an allocation that found
 * no memory wait for it, as they take every thread's magazines.
 */
#include "inject.h"
#include "mag_impl.h"
#include "os.h"

static bool mag_thread_fence; /* os_fence_threads works: idle threads' magazines can be taken */

void mag_reclaim_init(void) {
#ifndef __SANITIZE_THREAD__ /* ThreadSanitizer cannot see the fence's ordering (rseq.h) */
  mag_thread_fence = os_fence_threads_register();
#endif
}

/* Where mag_reclaim keeps the tops of the loaded magazines it parked (mag.h), for
   MAG_PARK_BATCH threads under one fence (mag_registry_lock). Static: the reaper may run in a
   slow path, on a small stack. */
#define MAG_PARK_BATCH 8
static void **mag_parked[MAG_PARK_BATCH][SC_COUNT + 1];

/* Parks the loaded magazines of a thread (its lock held): swaps the sentinel in for each top,
   keeping what it held in parked[]. Returns whether it parked any. */
static bool mag_thread_park(tcache_t *tc, void ***parked) {
  bool any = false;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    void ***top = &tc->own.top[c];
    parked[c] = MAG_TOP_NONE;
    if (__atomic_load_n(top, __ATOMIC_RELAXED) != MAG_TOP_NONE)
      parked[c] = __atomic_exchange_n(top, MAG_TOP_NONE, __ATOMIC_RELAXED);
    any |= parked[c] != MAG_TOP_NONE;
  }
  return any;
}

/* After the fence (fenced) or in its place: takes or gives back what mag_thread_park parked
   (theory 4). */
static void mag_thread_settle(tcache_t *tc, void **const *parked, bool fenced) {
  bool take = fenced && __atomic_load_n(&tc->busy, __ATOMIC_ACQUIRE) == 0;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    void **sentinel = MAG_TOP_NONE;
    if (parked[c] == MAG_TOP_NONE) continue;
    if (!take)
      __atomic_compare_exchange_n(&tc->own.top[c], &sentinel, parked[c], false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED);
    else if (__atomic_load_n(&tc->own.top[c], __ATOMIC_RELAXED) == MAG_TOP_NONE) {
      mag_t *m = mag_top_unload(parked[c]); /* the parked top gives its count */
      mag_to_depot(&malloc_caches[c], m);
      mag_to_depot(&malloc_caches[c], tc->own.prev[c]);
      tc->own.prev[c] = &mag_empty;
    }
  }
}

/* Threads that have not missed for an interval (or all) give up their magazines, where the
   fence works: parked a batch of threads at a time, which stay locked until one fence has
   covered them. */
void mag_reclaim(bool all) {
  mag_cpu_reclaim(all);
  os_touch(mag_parked, sizeof mag_parked); /* written first under the registry's lock */
  mag_registry_enter();
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry;) {
    tcache_t *batch[MAG_PARK_BATCH];
    unsigned n = 0;
    for (; tc != &mag_registry && n < MAG_PARK_BATCH; tc = tc->next) {
      if (!mag_reap_lock(&tc->lock, all)) continue; /* in a slow path, so not idle */
      bool idle = !tc->cpus && (all || tc->misses == tc->misses_seen);
      tc->misses_seen = tc->misses;
      if (idle && mag_thread_fence && mag_thread_park(tc, mag_parked[n])) {
        batch[n++] = tc;
        continue;
      }
      lock_release(&tc->lock);
    }
    if (n) INJECT(INJECT_THREAD_PARKED);
    bool fenced = n && os_fence_threads();
    for (unsigned i = 0; i < n; i++) {
      mag_thread_settle(batch[i], mag_parked[i], fenced);
      lock_release(&batch[i]->lock);
    }
  }
  mag_registry_leave();
}
