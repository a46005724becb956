/*
 * realloc and reallocarray: NULL acts as malloc, contents survive growing and shrinking between
 * every pair of small and large sizes, realloc(p, 0) frees p and returns NULL (glibc's
 * documented behaviour), and a long growth chain keeps every byte.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>

/* Sizes of both kinds: small blocks (size classes) and large ones (page runs). */
static const size_t small_sizes[] = {1, 8, 15, 16, 24, 100, 512, 1000, 2048, 4000, 8192};
static const size_t large_sizes[] = {300 * KiB, 1 * MiB, 1 * MiB + 1, 3 * MiB + 12345, 16 * MiB};
#define NUM_SMALL (sizeof small_sizes / sizeof small_sizes[0])
#define NUM_LARGE (sizeof large_sizes / sizeof large_sizes[0])

static uintptr_t next_tag = 1;

static void check_move(size_t from, size_t to) {
  uintptr_t tag = next_tag++;
  unsigned char *p = malloc(opaque_size(from));
  REQUIRE(p != NULL);
  pattern_fill(p, from, tag);
  unsigned char *q = realloc(p, opaque_size(to));
  REQUIRE(q != NULL);
  size_t keep = from < to ? from : to;
  size_t at = pattern_find_mismatch(q, keep, tag);
  if (at != keep)
    NOTE("  realloc %zu -> %zu: byte %zu of %zu lost (%p -> %p)\n", from, to, at, keep, (void *)p,
         (void *)q);
  CHECK(at == keep);
  CHECK(malloc_usable_size(q) >= to);
  CHECK(is_aligned(q, to >= 16 ? 16 : 1));
  /* The new size is writable to its end. */
  memset(q, 0x5c, to);
  free(q);
}

static void test_moves(void) {
  size_t all[NUM_SMALL + NUM_LARGE];
  for (size_t i = 0; i < NUM_SMALL; i++)
    all[i] = small_sizes[i];
  for (size_t i = 0; i < NUM_LARGE; i++)
    all[NUM_SMALL + i] = large_sizes[i];
  /* small->small, small->large, large->small, large->large, growing and shrinking; and to the
   * same size. */
  for (size_t i = 0; i < NUM_SMALL + NUM_LARGE; i++)
    for (size_t j = 0; j < NUM_SMALL + NUM_LARGE; j++)
      check_move(all[i], all[j]);
}

static void test_null_and_zero(void) {
  /* realloc(NULL, n) is malloc(n). */
  unsigned char *p = realloc(NULL, opaque_size(100));
  REQUIRE(p != NULL);
  CHECK(malloc_usable_size(p) >= 100);
  memset(p, 1, 100);
  free(p);
  p = realloc(NULL, opaque_size(2 * MiB));
  REQUIRE(p != NULL);
  memset(p, 1, 2 * MiB);
  free(p);
  /* realloc(NULL, 0) is malloc(0): a unique non-NULL pointer. */
  void *z1 = realloc(NULL, opaque_size(0));
  void *z2 = realloc(NULL, opaque_size(0));
  CHECK(z1 != NULL);
  CHECK(z2 != NULL);
  CHECK(z1 != z2);
  free(z1);
  free(z2);

  /* realloc(p, 0) with p non-NULL: glibc frees p and returns NULL. Freeing the result (NULL)
   * is then harmless; p must not be freed again. Repeated so that a leak or a broken free
   * shows up as a crash or an exhausted heap. */
  size_t sizes[] = {1, 64, 5000, 1 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (int r = 0; r < 200; r++) {
      void *b = malloc(opaque_size(sizes[i]));
      REQUIRE(b != NULL);
      memset(b, 2, sizes[i]);
      void *res = realloc(b, opaque_size(0));
      if (res != NULL && r == 0)
        NOTE("  realloc(malloc(%zu), 0) = %p, glibc returns NULL\n", sizes[i], res);
      CHECK(res == NULL);
      free(res); /* NULL, or the block realloc returned instead */
    }
  }
}

/* A string-builder pattern: grow by small random steps to 256 KiB, checking everything kept. */
static void test_growth_chain(void) {
  api_rng_t rng = {0xfeedface12345ULL};
  unsigned char *buf = NULL;
  size_t len = 0;
  while (len < 256 * KiB) {
    size_t next = len + 1 + (size_t)(api_rng_next(&rng) % 700);
    unsigned char *grown = realloc(buf, opaque_size(next));
    REQUIRE(grown != NULL);
    if (!pattern_ok(grown, len, 99)) {
      NOTE("  growth chain: lost bytes growing %zu -> %zu\n", len, next);
      CHECK(pattern_ok(grown, len, 99));
      free(grown);
      return;
    }
    buf = grown;
    /* Extend the pattern over the new bytes. */
    for (size_t i = len; i < next; i++)
      buf[i] = pattern_byte(99, i);
    len = next;
  }
  /* And back down in steps. */
  while (len > 1) {
    len = len / 2;
    unsigned char *shrunk = realloc(buf, opaque_size(len));
    REQUIRE(shrunk != NULL);
    buf = shrunk;
    CHECK(pattern_ok(buf, len, 99));
  }
  free(buf);
}

/* Growing in place must not corrupt a neighbour: two blocks side by side, grow the first by a
 * little many times, check the second each time. */
static void test_neighbours(void) {
  for (size_t n = 8; n <= 4096; n = n * 2 + 8) {
    unsigned char *a = malloc(opaque_size(n));
    unsigned char *b = malloc(opaque_size(n));
    REQUIRE(a != NULL && b != NULL);
    pattern_fill(a, n, 1);
    pattern_fill(b, n, 2);
    for (size_t m = n; m < 4 * n; m += 7) {
      unsigned char *grown = realloc(a, opaque_size(m));
      REQUIRE(grown != NULL);
      a = grown;
      CHECK(pattern_ok(a, n, 1));
      memset(a + n, 0xee, m - n);
      CHECK(pattern_ok(b, n, 2));
    }
    free(a);
    free(b);
  }
}

/* Blocks from the aligned allocators can be resized like any other; realloc keeps the contents
 * (not the alignment beyond the default, which it does not promise). */
static void test_aligned_blocks(void) {
  size_t alignments[] = {32, 256, 4096, 64 * KiB, 2 * MiB};
  size_t sizes[] = {1, 40, 3000, 70000, 3 * MiB};
  for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; i++) {
    for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t from = sizes[j], to = sizes[k] + 5;
        uintptr_t tag = next_tag++;
        unsigned char *p = aligned_alloc(opaque_size(alignments[i]), opaque_size(from));
        REQUIRE(p != NULL);
        CHECK(is_aligned(p, alignments[i]));
        pattern_fill(p, from, tag);
        unsigned char *q = realloc(p, opaque_size(to));
        REQUIRE(q != NULL);
        size_t keep = from < to ? from : to;
        if (!pattern_ok(q, keep, tag))
          NOTE("  realloc of aligned_alloc(%zu, %zu) to %zu lost contents\n", alignments[i], from,
               to);
        CHECK(pattern_ok(q, keep, tag));
        CHECK(malloc_usable_size(q) >= to);
        CHECK(is_aligned(q, 16));
        memset(q, 0x6d, to);
        free(q);
      }
    }
  }
}

static void test_reallocarray(void) {
  /* NULL: acts as mallocarray. */
  unsigned int *v = reallocarray(NULL, opaque_size(10), sizeof *v);
  REQUIRE(v != NULL);
  for (unsigned int i = 0; i < 10; i++)
    v[i] = i * 3u;
  /* Grow, keep contents. */
  unsigned int *w = reallocarray(v, opaque_size(100000), sizeof *w);
  REQUIRE(w != NULL);
  for (unsigned int i = 0; i < 10; i++)
    CHECK(w[i] == i * 3u);
  for (unsigned int i = 0; i < 100000; i++)
    w[i] = i ^ 0x5555u;
  /* Shrink, keep contents. */
  v = reallocarray(w, opaque_size(50), sizeof *v);
  REQUIRE(v != NULL);
  for (unsigned int i = 0; i < 50; i++)
    CHECK(v[i] == (i ^ 0x5555u));
  /* Overflow: NULL, ENOMEM, old block intact. */
  errno = 0;
  unsigned int *fail = reallocarray(v, opaque_size(SIZE_MAX / 2 + 1), opaque_size(4));
  CHECK(fail == NULL);
  CHECK(errno == ENOMEM);
  if (fail == NULL) {
    for (unsigned int i = 0; i < 50; i++)
      CHECK(v[i] == (i ^ 0x5555u));
    free(v);
  } else {
    free(fail);
  }
}

/* A realloc that can be served neither in place nor elsewhere leaves the block as it was, its
   usable size too: many blocks, so that under the heap profiler (profile16k in the option
   matrix) sampled ones, which the large path serves, are among them. */
static void test_failed_growth_keeps_blocks(void) {
  enum { BLOCKS = 256 };
  void *blocks[BLOCKS];
  size_t usable[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    blocks[i] = malloc(opaque_size(6000));
    REQUIRE(blocks[i] != NULL);
    usable[i] = malloc_usable_size(blocks[i]);
  }
  for (int i = 0; i < BLOCKS; i++) {
    errno = 0;
    CHECK(realloc(blocks[i], opaque_size(SIZE_MAX / 4)) == NULL);
    CHECK(errno == ENOMEM);
    CHECK(malloc_usable_size(blocks[i]) == usable[i]);
    free(blocks[i]);
  }
}

int main(void) {
  api_begin("realloc");
  test_null_and_zero();
  test_moves();
  test_growth_chain();
  test_neighbours();
  test_aligned_blocks();
  test_reallocarray();
  test_failed_growth_keeps_blocks();
  return api_end();
}
