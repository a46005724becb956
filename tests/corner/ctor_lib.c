/*
 * A library for dlopen (dlopen.c) that allocates in its constructor, before dlopen returns:
 * CTOR_BLOCKS blocks of mixed sizes (blocks.h). The program checks them and frees half; the
 * destructor, run by dlclose, checks and frees the other half and allocates and frees a few
 * blocks of its own, so malloc and free are used from inside the dynamic loader's lock in both
 * directions. What the destructor finds is written where the program asked (ctor_lib_report),
 * as the library cannot be called after dlclose.
 */
#include "blocks.h"

#define CTOR_BLOCKS 300

static void *blocks[CTOR_BLOCKS];
static unsigned long *report_bad, *report_freed;

__attribute__((constructor)) static void ctor_lib_init(void) {
  api_rng_t rng = {0x1234567ull};
  for (int i = 0; i < CTOR_BLOCKS; i++)
    blocks[i] = block_new(block_size(&rng), (uintptr_t)i);
}

__attribute__((destructor)) static void ctor_lib_fini(void) {
  unsigned long bad = 0, freed = 0;
  for (int i = 0; i < CTOR_BLOCKS; i++) {
    void *own = block_new(64 + (size_t)i, (uintptr_t)-i);
    bad += own == NULL || !block_ok(own);
    free(own);
    if (blocks[i] == NULL) continue;
    bad += !block_ok(blocks[i]);
    free(blocks[i]);
    freed++;
  }
  if (report_bad != NULL) *report_bad = bad;
  if (report_freed != NULL) *report_freed = freed;
}

/* The constructor's blocks; the program may free some and set their entries to NULL. */
void **ctor_lib_blocks(int *count) {
  *count = CTOR_BLOCKS;
  return blocks;
}

/* Where the destructor writes how many bad blocks it found and how many it freed. */
void ctor_lib_report(unsigned long *bad, unsigned long *freed) {
  report_bad = bad;
  report_freed = freed;
}
