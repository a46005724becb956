/*
 * Frees across a thread that a library's constructor started before main (early_thread_lib.c):
 * main checks and frees every block that thread allocated, while the thread checks and frees
 * blocks main allocates, both at once. The thread's first blocks were allocated before main
 * ran, possibly before magpie had seen the main thread allocate at all, so they exercise the
 * allocator's earliest state being handed to a thread that arrived later.
 */
#include "blocks.h"

void *early_take(void);
int early_give(void *block);
int early_join(unsigned long *bad, unsigned long *freed);

int main(void) {
  api_begin("early_thread");
  api_rng_t rng = {0xabcdull};
  unsigned long taken = 0, bad = 0, given = 0;
  for (void *b; (b = early_take()) != NULL; taken++) {
    bad += !block_ok(b);
    free(b);
    void *mine = block_new(block_size(&rng), taken);
    REQUIRE(mine != NULL);
    REQUIRE(early_give(mine));
    given++;
  }
  REQUIRE(early_give(NULL));
  unsigned long thread_bad = 0, thread_freed = 0;
  REQUIRE(early_join(&thread_bad, &thread_freed) == 0);
  fprintf(stderr, "  freed %lu of the early thread's blocks; it freed %lu of %lu of mine\n", taken,
          thread_freed, given);
  CHECK(taken > 0);
  CHECK(bad == 0);
  CHECK(thread_bad == 0);
  CHECK(thread_freed == given);
  return api_end();
}
