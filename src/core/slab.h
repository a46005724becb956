/* slab: spans cut into equal objects. See slab.c. */
#ifndef MAGPIE_SLAB_H
#define MAGPIE_SLAB_H

#include "cache.h"
#include "pagemap.h"
#include "vmem.h"

#define SLAB_OBJECTS_MAX 4096 /* 64 KiB of 16-byte objects; bigger objects get bigger spans */
#define SLAB_HOME_MAX 512     /* homes own slabs of malloc's classes up to this size (theory 8) */
_Static_assert(SLAB_OBJECTS_MAX / 64 <= UINT16_MAX, "a slab's map words count in scan");

struct slab {
  slab_t *next, *prev; /* on cache->partial, or cache->owned where it has an owner (slab_lock) */
  uintptr_t base;      /* the span's first byte; object i is at base + i * size */
  cache_t *cache;
  uint32_t used;   /* objects out of the slab */
  uint32_t carved; /* objects [0, carved) have been handed out at least once */
  uint32_t nfree;  /* returned objects: the bits set in map */
  uint16_t scan;   /* map words below this one hold no set bit */
  bool listed;     /* on cache->partial or cache->owned */
  bool from_heap;  /* its span came from the heap arena, not the slab arena (slab.c theory 1) */
  bool returned;   /* objects came back since slab_give_back last looked (slab.c theory 6) */
  uint16_t giving; /* give-backs and refills holding its free objects on hollow chunks (theory 6) */
  uint32_t owner;  /* the home whose refills alone take from it, or 0 (slab.c theory 8) */
  uint64_t hollow; /* bit i set: chunk i's pages went back to the kernel (slab.c theory 6) */
  uint64_t map[];  /* bit i set: object i (< carved) came back and is free */
};

extern vmem_t heap_arena;         /* where large blocks and the slab arena's huge pages come from */
extern size_t slab_hollow_bytes;  /* bytes of slabs given back inside them now (atomic) */
extern size_t slab_stashed_bytes; /* free spans the CPUs' stashes keep (theory 9; atomic) */
/* Whether free blocks may lose their pages (theories 6 and 7): set at bring-up, off in debug
   and memcheck modes, which keep records in free blocks. */
extern bool slab_pages_may_go;

/* Hands out up to n constructed objects; returns how many (0: out of memory or ctor failed).
   run: never-used objects in address order where the first partial slab has n of them.
   home: the thread or CPU whose magazines the objects fill (theory 8), or 0 for none; only
   malloc's classes of SLAB_HOME_MAX bytes at most have homes. */
unsigned slab_alloc(cache_t *cp, void **out, unsigned n, bool run, uint32_t home);
/* The slabs that home owns in cp (every home's where home is 0) go back to the shared list
   (theory 8): the home's thread exits, a quiet heap's reap, a fork's child. */
void slab_disown(cache_t *cp, uint32_t home);
/* The spans the CPUs' stashes keep (theory 9) go back to the slab arena: a quiet heap's reap, a
   trim, the reclaim after an allocation found no memory. */
void slab_stash_flush(void);
void slab_stash_fork_child(void); /* the stashes' locks free again in a fork's child */
/* Takes back n objects (destructing them first); reports objects that are not the cache's. */
void slab_free(cache_t *cp, void **objs, unsigned n);
/* Whether cp's slabs are packed into the slab arena's huge pages, where the pages of a slab
   that empties go to the next slab made (vmem.c theory 9), rather than cut from the heap
   arena. */
bool slab_packed(const cache_t *cp);
/* The slab holding obj if it is an object start of cache cp's slabs, else NULL, where e is
   obj's page-map entry. No lock: a slab's base and cache never change while its pages map to
   it. */
static inline slab_t *slab_at(const cache_t *cp, const void *obj, uintptr_t e) {
  if ((e & PM_TAG_MASK) != cp->tag) return NULL;
  slab_t *s = (slab_t *)(e & ~PM_TAG_MASK);
  uint64_t off = (uintptr_t)obj - s->base;
  return s->cache == cp && off * cp->div_magic <= cp->div_magic - 1 ? s : NULL;
}
static inline slab_t *slab_of(const cache_t *cp, const void *obj) {
  return slab_at(cp, obj, pagemap_get((uintptr_t)obj));
}
/* Gives back to the kernel the pages of cp's slabs on which every object is free (theory 6);
   only for malloc's classes, and nothing unless slab_pages_may_go. Returns the bytes. */
size_t slab_give_back(cache_t *cp);
void slab_check(cache_t *cp); /* aborts with a report if an invariant is broken */

#endif
