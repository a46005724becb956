/*
 * calloc returns zeroed memory, including memory that was just used and freed: each size is
 * first dirtied (malloc, fill with DIRTY, free) and then taken back by calloc many times, both
 * one at a time (the same slot again) and as a batch (many recycled slots).
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>

#define DIRTY 0xAA
#define BATCH 64 /* blocks dirtied and then taken back together */

/* One size: single-slot recycling `rounds` times, then a batch. */
static void check_size_zeroed(size_t count, size_t size, int rounds) {
  size_t n = count * size;
  for (int r = 0; r < rounds; r++) {
    unsigned char *dirty = malloc(opaque_size(n));
    REQUIRE(dirty != NULL);
    memset(dirty, DIRTY, n);
    free(dirty);
    unsigned char *z = calloc(opaque_size(count), opaque_size(size));
    REQUIRE(z != NULL);
    if (!all_bytes_are(z, n, 0)) {
      NOTE("  calloc(%zu, %zu) round %d: not zero (recycled %s)\n", count, size, r,
           (void *)z == (void *)dirty ? "the same block" : "another block");
      CHECK(all_bytes_are(z, n, 0));
    }
    /* Leave it dirty for the next round. */
    memset(z, DIRTY, n);
    free(z);
  }
  int batch = n >= MiB ? 4 : BATCH;
  unsigned char *blocks[BATCH];
  for (int i = 0; i < batch; i++) {
    blocks[i] = malloc(opaque_size(n));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], DIRTY, malloc_usable_size(blocks[i]));
  }
  for (int i = 0; i < batch; i++)
    free(blocks[i]);
  for (int i = 0; i < batch; i++) {
    blocks[i] = calloc(opaque_size(count), opaque_size(size));
    REQUIRE(blocks[i] != NULL);
  }
  unsigned long bad = 0;
  for (int i = 0; i < batch; i++) {
    if (!all_bytes_are(blocks[i], n, 0)) bad++;
    free(blocks[i]);
  }
  if (bad != 0) NOTE("  calloc(%zu, %zu) batch: %lu blocks not zero\n", count, size, bad);
  CHECK(bad == 0);
}

int main(void) {
  api_begin("calloc");
  /* Every small size, then a spread of larger ones. */
  for (size_t n = 1; n <= 1024; n++)
    check_size_zeroed(1, n, 4);
  for (size_t n = 1024; n <= 512 * KiB; n = n * 3 / 2 + 8)
    check_size_zeroed(1, n, 8);
  /* Count times size, not only size. */
  check_size_zeroed(1000, 24, 50);
  check_size_zeroed(3, 333, 50);
  check_size_zeroed(256, 4096, 10);
  /* Large sizes, where freed memory may come back from a cache of spans. */
  check_size_zeroed(1, 1 * MiB, 50);
  check_size_zeroed(1, 1 * MiB + 4097, 20);
  check_size_zeroed(1, 16 * MiB, 6);
  check_size_zeroed(16, 1 * MiB, 4);

  /* Memory given back by a realloc that shrank a large block (perhaps in place, its tail
   * returned) comes back zeroed through calloc. */
  for (int r = 0; r < 4; r++) {
    unsigned char *big = malloc(opaque_size(16 * MiB));
    REQUIRE(big != NULL);
    memset(big, DIRTY, 16 * MiB);
    unsigned char *small = realloc(big, opaque_size(1 * MiB + 100));
    REQUIRE(small != NULL);
    unsigned char *z = calloc(1, opaque_size(8 * MiB));
    REQUIRE(z != NULL);
    CHECK(all_bytes_are(z, 8 * MiB, 0));
    /* And growing back: the old bytes kept, whatever the new ones hold. */
    unsigned char *grown = realloc(small, opaque_size(12 * MiB));
    REQUIRE(grown != NULL);
    CHECK(all_bytes_are(grown, 1 * MiB + 100, DIRTY));
    free(z);
    free(grown);
  }

  /* calloc(0, n) and calloc(n, 0) behave like malloc(0): unique, non-NULL, freeable. */
  void *a = calloc(opaque_size(0), opaque_size(8));
  void *b = calloc(opaque_size(8), opaque_size(0));
  CHECK(a != NULL);
  CHECK(b != NULL);
  CHECK(a != b);
  free(a);
  free(b);

  /* Mixed with other traffic: a dirty block of another size class in between. */
  for (int r = 0; r < 1000; r++) {
    size_t n = 16 + (size_t)r % 200;
    unsigned char *d1 = malloc(opaque_size(n)), *d2 = malloc(opaque_size(n + 300));
    REQUIRE(d1 != NULL && d2 != NULL);
    memset(d1, DIRTY, n);
    memset(d2, DIRTY, n + 300);
    free(d2);
    free(d1);
    unsigned char *z = calloc(1, opaque_size(n));
    REQUIRE(z != NULL);
    CHECK(all_bytes_are(z, n, 0));
    free(z);
  }
  return api_end();
}
