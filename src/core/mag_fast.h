/*
 * mag_fast: the magazine layer's inline operations, which the fast path (front/fastpath.h) and
 * the magazine layer's own slow paths (mag.c) share: pop a block from, and push one onto, the
 * loaded magazine of a class, per-CPU in a restartable sequence (rseq.h) or the thread's own.
 * A thread's own loaded magazine that runs out (fills up) trades places with the previous one
 * here when that one has rounds (room); a CPU's does at the start of the slow path
 * (mag_percpu.c theory 2). No lock, no atomic read-modify-write.
 */
#ifndef MAGPIE_MAG_FAST_H
#define MAGPIE_MAG_FAST_H

#include "export.h"
#include "mag.h"
#include "rseq.h"

/* A thread works on its own loaded magazines between fast_enter and fast_leave: the reaper
   takes them only from a thread that is not (mag_reclaim.c). Compiler barriers suffice: the
   reaper's membarrier orders the processors; the release store that clears the mark makes
   the operation's stores visible to a reaper that reads it clear (acquire) on processors that
   reorder stores. Plain stores, not a count, which would chain every call through one word
   (docs/decisions/reaper-parking.md). (A signal handler that allocates in the middle of a call
   clears the flag early; malloc is not async-signal-safe, so such a program is already
   outside malloc's contract.) */
static MP_INLINE mag_t *fast_enter(tcache_t *tc, size_t c) {
  __atomic_store_n(&tc->busy, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&tc->own[c].mags.loaded, __ATOMIC_RELAXED);
}

static MP_INLINE void fast_leave(tcache_t *tc) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&tc->busy, 0, __ATOMIC_RELEASE); /* a plain store on x86 */
}

/* The loaded magazine of class c ran out (alloc) or filled up: if the previous one has rounds
   (room), they trade places, between fast_enter and fast_leave and without the tcache's lock,
   so that a thread whose working set straddles the two pays no slow path (mag_reclaim.c: how
   the reaper allows it). Returns the magazine now loaded, or NULL: the previous one cannot
   serve either, or the sentinel is loaded (the only magazine without room: how the reaper
   parks a class, and with which the owner never trades). The empty asm hides tc from the
   optimiser, which otherwise keeps this rare path's addresses in registers across the common
   one (docs/decisions/fast-path-trade.md). */
static inline mag_t *fast_trade(tcache_t *tc, size_t c, bool alloc) {
  __asm__("" : "+r"(tc));
  mag_pair_t *t = &tc->own[c].mags;
  mag_t *m = t->loaded, *prev = t->prev;
  if (m->cap == 0 || (alloc ? prev->n == 0 : prev->n == prev->cap)) return NULL;
  __atomic_store_n(&t->loaded, prev, __ATOMIC_RELAXED);
  __atomic_store_n(&t->prev, m, __ATOMIC_RELAXED);
  return prev;
}

/* Pops from the loaded magazine of class c the thread uses and counts the allocation; NULL if
   the magazine is empty. Each branch counts in its own layout of the tcache's classes. */
static MP_INLINE void *fast_pop(tcache_t *tc, size_t c) {
#if RSEQ_SUPPORTED
  if (tc->cpus) {
    uint32_t *count = &tc->cpu_counts[c].allocs;
    if (!MP_LIKELY(*count >> 31 == 0)) return NULL; /* the slow path folds it (mag.h) */
    void *p = rseq_pop(tc->cpus + MAG_CPU_SLOT(c), mag_consts.rseq_area);
    if (MP_LIKELY(p != NULL)) STAT_ADD(*count, 1);
    return p;
  }
#endif
  mag_t *m = fast_enter(tc, c);
  uint32_t n = m->n;
  if (!MP_LIKELY(n != 0)) {
    if (!(m = fast_trade(tc, c, true))) {
      fast_leave(tc);
      return NULL;
    }
    n = m->n;
  }
  m->n = n - 1;
  void *p = m->rounds[n - 1];
  if (p == NULL) __builtin_unreachable(); /* rounds are blocks: the caller need not test */
  STAT_ADD(tc->own[c].count.allocs, 1);
  fast_leave(tc);
  return p;
}

/* Pushes p onto the loaded magazine of class c the thread uses and counts the free; 0 if the
   magazine is full. */
static MP_INLINE int fast_push(tcache_t *tc, size_t c, void *p) {
#if RSEQ_SUPPORTED
  if (tc->cpus) {
    uint32_t *count = &tc->cpu_counts[c].frees;
    if (!MP_LIKELY(*count >> 31 == 0)) return 0; /* the slow path folds it (mag.h) */
    int pushed = rseq_push(tc->cpus + MAG_CPU_SLOT(c), mag_consts.rseq_area, p);
    if (MP_LIKELY(pushed)) STAT_ADD(*count, 1);
    return pushed;
  }
#endif
  mag_t *m = fast_enter(tc, c);
  uint32_t n = m->n;
  if (!MP_LIKELY(n != m->cap)) {
    if (!(m = fast_trade(tc, c, false))) {
      fast_leave(tc);
      return 0;
    }
    n = m->n;
  }
  m->rounds[n] = p;
  m->n = n + 1;
  STAT_ADD(tc->own[c].count.frees, 1);
  fast_leave(tc);
  return 1;
}

#endif
