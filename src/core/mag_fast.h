/*
 * mag_fast: the magazine layer's inline operations, which the fast path (front/fastpath.h) and
 * the magazine layer's own slow paths (mag.c) share: pop a block from, and push one onto, the
 * loaded magazine of a class, per-CPU in a restartable sequence (rseq.h) or the thread's own.
 * A thread's own loaded magazine is a pointer to its top, both ends marked (mag.h). A loaded
 * magazine that runs out (fills up) trades places with the previous one at the start of the
 * slow path, without a lock (mag.c theory 8, mag_percpu.c theory 2). No lock, no atomic
 * read-modify-write.
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
   outside malloc's contract.) Returns the top of class c's loaded magazine (mag.h). */
static MP_INLINE void **fast_enter(tcache_t *tc, size_t c) {
  __atomic_store_n(&tc->busy, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&tc->own.top[c], __ATOMIC_RELAXED);
}

static MP_INLINE void fast_leave(tcache_t *tc) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&tc->busy, 0, __ATOMIC_RELEASE); /* a plain store on x86 */
}

/* Pops from (pushes p onto) the thread's own loaded magazine of class c, whose top is top,
   between fast_enter and fast_leave: NULL (0) where it was empty (full). Counts the operation. */
static MP_INLINE void *fast_own_pop(tcache_t *tc, size_t c, void **top) {
  void *p = top[-1];
  if (!MP_LIKELY(!mag_is_end(p))) return NULL;
  if (p == NULL) __builtin_unreachable(); /* rounds are blocks: the caller need not test */
  __atomic_store_n(&tc->own.top[c], top - 1, __ATOMIC_RELAXED);
  STAT_ADD(tc->own.allocs[c], 1);
  return p;
}

static MP_INLINE int fast_own_push(tcache_t *tc, size_t c, void **top, void *p) {
  if (!MP_LIKELY(!mag_is_end(*top))) return 0;
  *top = p;
  __atomic_store_n(&tc->own.top[c], top + 1, __ATOMIC_RELAXED);
  STAT_ADD(tc->own.frees[c], 1);
  return 1;
}

/* Pops from the loaded magazine of class c the thread uses and counts the allocation; NULL if
   the magazine is empty. Each branch counts in its own layout of the tcache's classes. */
static MP_INLINE void *fast_pop(tcache_t *tc, size_t c) {
#if RSEQ_SUPPORTED
  if (tc->cpus) {
    uint32_t *count = &tc->cpu_counts[c].allocs;
    if (!MP_LIKELY(*count >> 31 == 0)) return NULL; /* the slow path folds it (mag.h) */
    void *p = rseq_pop(tc->cpus + MAG_CPU_SLOT(c), mag_consts.rseq_area);
    if (!MP_LIKELY(p != NULL)) return NULL; /* empty */
    STAT_ADD(*count, 1);
    return p;
  }
#endif
  void *p = fast_own_pop(tc, c, fast_enter(tc, c));
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
  int pushed = fast_own_push(tc, c, fast_enter(tc, c), p);
  fast_leave(tc);
  return pushed;
}

#endif
