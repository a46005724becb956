/* slab: spans cut into equal objects. See slab.c. */
#ifndef MAGPIE_SLAB_H
#define MAGPIE_SLAB_H

#include "cache.h"
#include "vmem.h"

struct slab {
  slab_t *next, *prev; /* on cache->partial (slab_lock) */
  uintptr_t base;      /* the span's first byte; object i is at base + i * size */
  cache_t *cache;
  void *free;      /* returned objects, linked through their second word */
  uint32_t used;   /* objects out of the slab */
  uint32_t carved; /* objects [0, carved) have been handed out at least once */
  bool listed;     /* on cache->partial */
};

extern vmem_t heap_arena; /* where spans and large blocks come from */

/* Hands out up to n constructed objects; returns how many (0: out of memory or ctor failed). */
unsigned slab_alloc(cache_t *cp, void **out, unsigned n);
/* Takes back n objects (destructing them first); reports objects that are not the cache's. */
void slab_free(cache_t *cp, void **objs, unsigned n);
/* The slab holding obj if it is an object start of cache cp's slabs, else NULL (no lock). */
slab_t *slab_of(cache_t *cp, const void *obj);
void slab_check(cache_t *cp); /* aborts with a report if an invariant is broken */

#endif
