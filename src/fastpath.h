/*
 * fastpath: malloc and free of a small block, inline. The whole common case is here.
 *
 * malloc (size <= 256 KiB): the class (one table load up to 32 KiB, a few instructions above),
 * then pop from the loaded magazine: the CPU's, in a restartable sequence (rseq.h), or the
 * thread's own where per-CPU magazines are off (mag.c says when).
 * free: two page-map loads give the class; the pointer must be an object start (one multiply)
 * and must not carry the free marker (one load); push onto the loaded magazine.
 * A thread's own loaded magazine that runs out (fills up) trades places with the previous one
 * right here when that one has rounds (room).
 * Anything else - both magazines empty or full, a first call, a large block, a bad pointer -
 * takes one predictable branch to the out-of-line slow path. No lock, no atomic RMW.
 *
 * The free marker: a freed block's first word holds (its address ^ mag_secret); malloc
 * clears it. Seeing it on free means the block is already free: a double free.
 */
#ifndef MAGPIE_FASTPATH_H
#define MAGPIE_FASTPATH_H

#include "depot.h"
#include "mag.h"
#include "pagemap.h"
#include "rseq.h"
#include "sizeclass.h"

#ifdef __cplusplus
extern "C" {
#endif
void *malloc_slow(size_t size); /* api.c */
void free_slow(void *p);        /* api.c */
/* The slow paths of C++ new and delete, which tell debug mode what they are (debug.h). */
void *malloc_slow_kind(size_t size, size_t align, int kind);
void free_slow_kind(void *p, size_t size, size_t align, int kind);
#ifdef __cplusplus
}
#endif

#define MP_LIKELY(x) __builtin_expect(!!(x), 1)

/* A thread works on its own loaded magazines between fast_enter and fast_leave: the reaper
   takes them only from a thread that is not (mag.c, theory 5). Compiler barriers suffice: the
   reaper's membarrier orders the processors; the release store that clears the mark makes
   the operation's stores visible to a reaper that reads it clear (acquire) on processors that
   reorder stores. Plain stores, not a count: an increment and a decrement chained every call
   through one word and made single-thread churn 6% slower. (A signal handler that allocates in the
   middle of a call clears the flag early; malloc is not async-signal-safe, and the thread's
   magazines were not safe from it before either.) */
static inline mag_t *fast_enter(tcache_t *tc, size_t c) {
  __atomic_store_n(&tc->busy, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&tc->cls.own[c].mags.loaded, __ATOMIC_RELAXED);
}

static inline void fast_leave(tcache_t *tc) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&tc->busy, 0, __ATOMIC_RELEASE); /* a plain store on x86 */
}

/* The loaded magazine of class c ran out (alloc) or filled up: if the previous one has rounds
   (room), they trade places, between fast_enter and fast_leave and without the tcache's lock,
   so that a thread whose working set straddles the two pays no slow path (mag.c, theory 5:
   how the reaper allows it). Returns the magazine now loaded, or NULL: the previous one cannot
   serve either, or the sentinel is loaded (the only magazine without room: how the reaper
   parks a class, and with which the owner never trades). The empty asm hides tc from the
   optimiser, which otherwise keeps this rare path's addresses in registers across the common
   one (callgrind: 4 instructions a malloc+free pair). */
static inline mag_t *fast_trade(tcache_t *tc, size_t c, bool alloc) {
  __asm__("" : "+r"(tc));
  tclass_t *t = &tc->cls.own[c].mags;
  mag_t *m = t->loaded, *prev = t->prev;
  if (m->cap == 0 || (alloc ? prev->n == 0 : prev->n == prev->cap)) return NULL;
  __atomic_store_n(&t->loaded, prev, __ATOMIC_RELAXED);
  __atomic_store_n(&t->prev, m, __ATOMIC_RELAXED);
  return prev;
}

/* Pops from the loaded magazine of class c the thread uses and counts the allocation; NULL if
   the magazine is empty. Each branch counts in its own layout of tc->cls. */
static inline void *fast_pop(tcache_t *tc, size_t c) {
#if RSEQ_SUPPORTED
  if (tc->cpus) {
    uint32_t *count = &tc->cls.cpu[c].allocs;
    if (!MP_LIKELY(*count >> 31 == 0)) return NULL; /* the slow path folds it (mag.h) */
    void *p = rseq_pop(tc->cpus + MAG_CPU_SLOT(c), mag_rseq_area);
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
  STAT_ADD(tc->cls.own[c].count.allocs, 1);
  fast_leave(tc);
  return p;
}

/* Pushes p onto the loaded magazine of class c the thread uses and counts the free; 0 if the
   magazine is full. */
static inline int fast_push(tcache_t *tc, size_t c, void *p) {
#if RSEQ_SUPPORTED
  if (tc->cpus) {
    uint32_t *count = &tc->cls.cpu[c].frees;
    if (!MP_LIKELY(*count >> 31 == 0)) return 0; /* the slow path folds it (mag.h) */
    int pushed = rseq_push(tc->cpus + MAG_CPU_SLOT(c), mag_rseq_area, p);
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
  STAT_ADD(tc->cls.own[c].count.frees, 1);
  fast_leave(tc);
  return 1;
}

/* Pops a block, or returns NULL: the caller takes a slow path. */
static inline void *fast_malloc_try(size_t size) {
  unsigned c;
  if (MP_LIKELY(size <= SC_LOOKUP_MAX)) /* the common sizes first: one compare, one load */
    c = sc_lookup[(size + 15) >> 4];
  else if (size <= SC_SMALL_MAX)
    c = sc_of(size);
  else
    return NULL;
  tcache_t *tc = mag_tls;
  void *p = fast_pop(tc, c);
  if (!MP_LIKELY(p != NULL)) return NULL;
  *(uintptr_t *)p = 0;
  STAT_ADD(tc->bytes_requested, size);
  return p;
}

static inline void *fast_malloc(size_t size) {
  void *p = fast_malloc_try(size);
  return MP_LIKELY(p != NULL) ? p : malloc_slow(size);
}

/* Pushes p onto the thread's magazine, or returns 0: the caller takes a slow path. */
static inline int fast_free_try(void *p) {
  uintptr_t a = (uintptr_t)p, e = pagemap_get(a);
  unsigned c = (unsigned)(e & PM_TAG_MASK);
  if (MP_LIKELY(c - 1u < SC_COUNT)) {
    uintptr_t marker = a ^ mag_secret;
    if (MP_LIKELY(sc_is_object_start(c, a) && *(uintptr_t *)p != marker)) {
      tcache_t *tc = mag_tls;
      uintptr_t word = *(uintptr_t *)p;
      *(uintptr_t *)p = marker; /* before the push: once pushed, p may be another thread's */
      if (MP_LIKELY(fast_push(tc, c, p))) return 1;
      *(uintptr_t *)p = word;
    }
  }
  return 0;
}

static inline void fast_free(void *p) {
  if (!fast_free_try(p)) free_slow(p);
}

#endif
