/* For the magazine-layer tests: how many slabs malloc's size classes hold now. */
#ifndef MAGPIE_TESTS_UNIT_SLABS_H
#define MAGPIE_TESTS_UNIT_SLABS_H

#include "cache.h"
#include "sizeclass.h"

static inline size_t unit_total_slabs(void) {
  size_t n = 0;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    lock_acquire(&malloc_caches[c].slab_lock);
    n += malloc_caches[c].slabs;
    lock_release(&malloc_caches[c].slab_lock);
  }
  return n;
}

#endif
