/*
 * fastpath: malloc and free of a small block, inline. The whole common case is here.
 *
 * malloc (size <= 256 KiB): the class (one table load up to 32 KiB, a few instructions above),
 * then pop from the loaded magazine: the CPU's, in a restartable sequence (rseq.h), or the
 * thread's own where per-CPU magazines are off (mag_percpu.c says when), which is a pointer to
 * its top, one load from the thread's cache (mag.h).
 * free: the page map gives the class (one byte load where the hot leaf covers the block, two
 * loads elsewhere: pagemap.h); the pointer must be an object start (one multiply) and must not
 * carry the free marker (one load); push onto the loaded magazine.
 * Anything else - the loaded magazine empty or full, a first call, a large block, a bad
 * pointer - takes one predictable branch to the out-of-line slow path, whose first step trades
 * an empty (full) loaded magazine for the previous one where that has rounds (room). No lock,
 * no atomic RMW.
 *
 * The free marker: a freed block's first word holds (its address ^ mag_consts.secret); malloc
 * clears it. Seeing it on free means the block is already free: a double free.
 *
 * C++ sized delete (cxx.cc) takes the class and its object-start test from the size it is
 * given (sc_sized) instead of the page map, where the size can be trusted
 * (docs/decisions/cxx-sized-delete.md): the size is the one the block was allocated with, so
 * the class is the one malloc took; the object-start and free-marker checks stay. Anything the
 * size cannot vouch for - a block over 32 KiB, a page-aligned one (the heap profiler's samples
 * are whole pages), any block while sampling or a checking mode is on, or where the program
 * started without the C++ runtime (sc_sized's tests fail then) - goes the page map's way, as
 * free does.
 */
#ifndef MAGPIE_FASTPATH_H
#define MAGPIE_FASTPATH_H

#include "mag_fast.h"
#include "pagemap.h"
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

/* Pops a block, or returns NULL: the caller takes a slow path. */
static MP_INLINE void *fast_malloc_try(size_t size) {
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

/* Pushes p, an object start of class c, onto the thread's magazine unless it is already free
   (its first word is marker, p ^ mag_consts.secret: the callers load the secret before their
   object-start test, so that the two run side by side); or returns 0: the caller takes a slow
   path, which checks it all again. */
static MP_INLINE int fast_free_start_try(void *p, size_t c, uintptr_t marker) {
  uintptr_t word = *(uintptr_t *)p;
  if (!MP_LIKELY(word != marker)) return 0;
  *(uintptr_t *)p = marker; /* before the push: once pushed, p may be another thread's */
  if (MP_LIKELY(fast_push(mag_tls, c, p))) return 1;
  *(uintptr_t *)p = word;
  return 0;
}

/* Pushes p onto the thread's magazine, or returns 0: the caller takes a slow path. A tag that
   is no class (0: not magpie's; a large, sampled or profiled block's) fails the object-start
   check (sizeclass.h), which so tests the tag too. */
static MP_INLINE int fast_free_try(void *p) {
  uintptr_t a = (uintptr_t)p, marker = a ^ mag_consts.secret;
  size_t c = pagemap_tag(a);
  return sc_is_object_start(c, a) && fast_free_start_try(p, c, marker);
}

/* fast_free_try of a block allocated with size bytes (C++ sized delete): the class from the
   size where sc_sized vouches for it, else from the page map. A page-aligned block (and NULL)
   takes the page map's way: it may be a heap-profiler sample, a whole page with no class. */
static MP_INLINE int fast_free_sized_try(void *p, size_t size) {
  uintptr_t a = (uintptr_t)p, marker = a ^ mag_consts.secret;
  if (MP_LIKELY(size <= SC_LOOKUP_MAX && (a & (OS_PAGE - 1)) != 0)) {
    /* &sc_sized[(size + 15) >> 4], rounded in one step: the table is 16-byte aligned */
    const sc_sized_t *s = (const sc_sized_t *)(((uintptr_t)sc_sized + size + 15) & ~(uintptr_t)15);
    uint64_t magic = __atomic_load_n(&s->div_magic, __ATOMIC_RELAXED);
    if (MP_LIKELY(sc_offset_is_start(a, s->span_mask, magic)))
      return fast_free_start_try(p, s->class_, marker);
  }
  return fast_free_try(p);
}

static inline void fast_free(void *p) {
  if (!fast_free_try(p)) free_slow(p);
}

#endif
