/* For the magazine-layer tests: checked blocks, and how many slabs malloc's classes hold. */
#ifndef MAGPIE_TESTS_UNIT_SLABS_H
#define MAGPIE_TESTS_UNIT_SLABS_H

#include "cache.h"
#include "magpie.h"
#include "sizeclass.h"
#include "unit.h"

#include <string.h>

/* A block of 16..16+spread-1 bytes: its size in the first word, then a byte pattern of its
   size, which unit_block_free checks (a block handed out twice fails it). */
static inline void *unit_block_new(uint64_t *rng, size_t spread) {
  size_t size = 16 + unit_rand(rng) % spread;
  unsigned char *p = magpie_malloc(size);
  UCHECK(p != NULL);
  ((size_t *)p)[0] = size;
  memset(p + sizeof(size_t), (int)(size & 0xff), size - sizeof(size_t));
  return p;
}

static inline void unit_block_free(void *p) {
  size_t size = ((size_t *)p)[0];
  const unsigned char *b = p;
  for (size_t i = sizeof(size_t); i < size; i++)
    UCHECK(b[i] == (unsigned char)(size & 0xff));
  magpie_free(p);
}

/* The slabs cache cp holds, read under its slab lock. */
static inline size_t unit_class_slabs(cache_t *cp) {
  lock_acquire(&cp->slab_lock);
  size_t n = cp->slabs;
  lock_release(&cp->slab_lock);
  return n;
}

static inline size_t unit_total_slabs(void) {
  size_t n = 0;
  for (unsigned c = 1; c <= SC_COUNT; c++)
    n += unit_class_slabs(&malloc_caches[c]);
  return n;
}

#endif
