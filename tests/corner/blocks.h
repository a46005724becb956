/*
 * Self-describing blocks for the corner tests: a block starts with its size and a tag, and the
 * rest holds the tag's pattern (check.h). Whoever ends up freeing a block, in another thread or
 * another library, can check that it still holds exactly what was written when it was made, so
 * a block handed out twice or overwritten by the allocator's own bookkeeping is caught where it
 * is freed. Sizes are drawn mostly small, sometimes page-sized, rarely large (past magpie's
 * size classes), as real programs mix them.
 */
#ifndef MAGPIE_TESTS_CORNER_BLOCKS_H
#define MAGPIE_TESTS_CORNER_BLOCKS_H

#include "check.h"

typedef struct {
  size_t size;
  uintptr_t tag;
} block_head_t;

/* A block of `size` bytes (at least a header's) filled for `tag`, or NULL when malloc fails. */
static inline void *block_new(size_t size, uintptr_t tag) {
  if (size < sizeof(block_head_t)) size = sizeof(block_head_t);
  block_head_t *b = (block_head_t *)malloc(opaque_size(size));
  if (b == NULL) return NULL;
  b->size = size;
  b->tag = tag;
  pattern_fill(b + 1, size - sizeof *b, tag);
  return b;
}

/* True when the block still holds what block_new wrote. */
static inline int block_ok(const void *p) {
  const block_head_t *b = (const block_head_t *)p;
  return b->size >= sizeof *b && pattern_ok(b + 1, b->size - sizeof *b, b->tag);
}

/* 16 B .. 1 KiB nine times in ten, up to 64 KiB otherwise, and 1 in 200 a 256 KiB block. */
static inline size_t block_size(api_rng_t *r) {
  uint64_t x = api_rng_next(r);
  if (x % 200 == 0) return 256 * KiB;
  if (x % 10 == 0) return 16 + (size_t)(x >> 16) % (64 * KiB);
  return 16 + (size_t)(x >> 16) % KiB;
}

#endif
