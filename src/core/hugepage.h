/* hugepage: the slab arena's 2 MiB huge pages, how they are backed and given back. See
   hugepage.c. */
#ifndef MAGPIE_HUGEPAGE_H
#define MAGPIE_HUGEPAGE_H

#include "vmem.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern vmem_t slab_arena; /* slabs of small objects: whole huge pages (theory 1) */

enum { HP_SMALL, HP_HUGE, HP_SUBRELEASED }; /* a slab huge page's backing (its span's marker) */
#define HP_OBJECT_MAX ((size_t)4096)        /* slabs of bigger objects stay off huge pages */

typedef struct hugepage_stats {
  const char *mode;            /* the hugepages option as used (hugetlb falls back to auto) */
  const char *thp;             /* the kernel's THP mode */
  bool on;                     /* huge pages are in use for new slab huge pages */
  uint64_t huge_bytes;         /* bytes of magpie's heap on huge pages (smaps) */
  uint64_t slab_bytes;         /* bytes the slab arena holds */
  uint64_t partial_free_bytes; /* free bytes inside partly used slab huge pages */
  uint64_t slab_hollow_bytes;  /* bytes given back inside slabs (slab.c theory 6), any arena */
  uint64_t slab_stashed_bytes; /* free spans kept at hand by CPU (slab.c theory 9) */
  uint64_t collapses, collapse_failures, subreleases;
} hugepage_stats_t;

void hugepage_init(void); /* after the heap arena */
/* A mapping the heap arena just made: with hugepages=never in THP mode always, kept off huge
   pages (theory 2). */
void hugepage_heap_mapped(void *p, size_t size);
/* Takes the hugepages option as it is now (options are read again once environ exists), unless
   slabs were made under the one taken before. */
void hugepage_options(void);
/* Where slabs of objects of this size come from: the slab arena for objects of at most a page,
   the heap arena for bigger ones (theory 1). */
static inline vmem_t *hugepage_arena(size_t object_size) {
  extern vmem_t heap_arena;
  return object_size <= HP_OBJECT_MAX ? &slab_arena : &heap_arena;
}
/* The reap of the heap and slab arenas (caches.c theory 3): whole free huge pages first, then
   pages inside partly used ones, as theory 4 says; returns the bytes given back. */
size_t hugepage_reap(size_t keep_dirty, bool everything);
/* A huge page to mark MADV_NOHUGEPAGE before pages inside it go back, or none (size 0). */
typedef struct hugepage_split {
  void *start;
  size_t size;
} hugepage_split_t;
/* Records that bytes of the slab at slab (from the slab arena) go back to the kernel inside it
   (negative: came back into use; split NULL); a huge page it lies on is subreleased first
   (theory 5): where it is, *split names it, and the caller passes it to hugepage_split before
   the pages go back, without holding a lock (madvise splits a huge page: not a lock's length).
   false: they may not (hugetlb pages), nothing recorded. */
bool hugepage_slab_hollow(const void *slab, ptrdiff_t bytes, hugepage_split_t *split);
void hugepage_split(const hugepage_split_t *split);
void hugepage_tick(void);                   /* the reaper thread's collapses, after each reap */
void hugepage_stats(hugepage_stats_t *out); /* reads /proc/self/smaps */

#endif
