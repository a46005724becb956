/*
 * malloc, free and malloc_usable_size: malloc(0), alignment of every size, usable size honesty,
 * free(NULL), free keeping errno, and a heap of many live blocks that must not overlap.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>

#define ZERO_BLOCKS 256    /* live malloc(0) blocks that must all differ */
#define SAME_SIZE_BLOCKS 8 /* live blocks per size in the alignment sweep: not only slot 0 */
#define SMALL_SWEEP_MAX 4096
#define HEAP_BLOCKS 20000  /* blocks of the overlap test */
#define HEAP_MAX_SIZE 3000 /* their largest size */

static int compare_pointers(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return x < y ? -1 : x > y;
}

/* The alignment the standard and glibc promise for a block of n bytes: 16 from 16 bytes up
 * (alignof(max_align_t)), otherwise the largest power of two not above n. */
static size_t promised_alignment(size_t n) {
  if (n >= 16) return 16;
  size_t a = 1;
  while (a * 2 <= n)
    a *= 2;
  return a;
}

static void test_malloc_zero(void) {
  void *blocks[ZERO_BLOCKS];
  for (int i = 0; i < ZERO_BLOCKS; i++) {
    blocks[i] = malloc(opaque_size(0));
    REQUIRE(blocks[i] != NULL);
  }
  void *first = blocks[0], *second = blocks[1];
  CHECK(first != second);
  qsort(blocks, ZERO_BLOCKS, sizeof blocks[0], compare_pointers);
  for (int i = 1; i < ZERO_BLOCKS; i++)
    CHECK(blocks[i] != blocks[i - 1]);
  for (int i = 0; i < ZERO_BLOCKS; i++)
    free(blocks[i]);
  /* Freed and taken again: still a valid block. */
  void *again = malloc(opaque_size(0));
  CHECK(again != NULL);
  free(again);
}

static void check_block_alignment(size_t n) {
  void *blocks[SAME_SIZE_BLOCKS];
  size_t want = promised_alignment(n);
  for (int i = 0; i < SAME_SIZE_BLOCKS; i++) {
    blocks[i] = malloc(opaque_size(n));
    REQUIRE(blocks[i] != NULL);
    if (!is_aligned(blocks[i], want)) {
      NOTE("  malloc(%zu) = %p, wanted alignment %zu\n", n, blocks[i], want);
      CHECK(is_aligned(blocks[i], want));
    }
    unsigned char *b = blocks[i];
    b[0] = 1;
    b[n - 1] = 2;
  }
  for (int i = 0; i < SAME_SIZE_BLOCKS; i++)
    free(blocks[i]);
}

static void test_alignment(void) {
  for (size_t n = 1; n <= SMALL_SWEEP_MAX; n++)
    check_block_alignment(n);
  /* Larger sizes: every power of two to 64 MiB, its neighbours, and sizes between. */
  for (size_t p = 8 * KiB; p <= 64 * MiB; p *= 2) {
    size_t sizes[] = {p - 1, p, p + 1, p + p / 3 + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      if (sizes[i] > 64 * MiB) continue;
      void *b = malloc(opaque_size(sizes[i]));
      REQUIRE(b != NULL);
      if (!is_aligned(b, 16)) NOTE("  malloc(%zu) = %p\n", sizes[i], b);
      CHECK(is_aligned(b, 16));
      ((unsigned char *)b)[0] = 1;
      ((unsigned char *)b)[sizes[i] - 1] = 2;
      free(b);
    }
  }
}

/* usable >= request; the whole usable size is writable and belongs to this block alone: two
 * neighbours filled across their whole usable sizes must not see each other's bytes. */
static void check_usable(size_t n) {
  void *a = malloc(opaque_size(n));
  void *b = malloc(opaque_size(n));
  REQUIRE(a != NULL && b != NULL);
  size_t ua = malloc_usable_size(a), ub = malloc_usable_size(b);
  if (ua < n || ub < n) NOTE("  malloc(%zu): usable sizes %zu and %zu\n", n, ua, ub);
  CHECK(ua >= n);
  CHECK(ub >= n);
  CHECK(malloc_usable_size(a) == ua); /* stable */
  memset(a, 0x11, ua);
  memset(b, 0x22, ub);
  CHECK(all_bytes_are(a, ua, 0x11));
  CHECK(all_bytes_are(b, ub, 0x22));
  free(b);
  free(a);
}

static void test_usable_size(void) {
  CHECK(malloc_usable_size(NULL) == 0);
  for (size_t n = 0; n <= 2 * SMALL_SWEEP_MAX; n++)
    check_usable(n);
  for (size_t n = 2 * SMALL_SWEEP_MAX; n <= 16 * MiB; n = n * 5 / 4 + 3)
    check_usable(n);
  check_usable(64 * MiB);
}

static void test_free_null_and_errno(void) {
  errno = 1234;
  free(NULL);
  CHECK(errno == 1234);
  size_t sizes[] = {0, 1, 16, 100, 1000, 5000, 40 * KiB, 300 * KiB, 2 * MiB, 64 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = malloc(opaque_size(sizes[i]));
    REQUIRE(p != NULL);
    memset(p, 1, sizes[i]);
    errno = 1234;
    free(p);
    if (errno != 1234) NOTE("  free of a %zu-byte block set errno %d\n", sizes[i], errno);
    CHECK(errno == 1234);
  }
  /* Batches of small frees, enough to overflow any per-thread cache into its slow path, again
     and again so that the periodic reap (its file checks, the live area) runs inside one under
     reap_ms=1 (api_malloc_basic@reap_ms1). */
  static void *many[4096];
  for (int round = 0; round < 500; round++) {
    for (int i = 0; i < 4096; i++)
      REQUIRE((many[i] = malloc(opaque_size(48 + (size_t)(i % 8) * 16))) != NULL);
    errno = 1234;
    for (int i = 0; i < 4096; i++)
      free(many[i]);
    if (errno != 1234) {
      NOTE("  a batch of frees (round %d) set errno %d\n", round, errno);
      CHECK(errno == 1234);
      break;
    }
  }
}

/* Many live blocks of mixed sizes, each filled across its whole usable size with its own
 * pattern, checked after all were written: catches blocks handed out twice or overlapping. */
static void test_live_heap(void) {
  static void *blocks[HEAP_BLOCKS];
  static size_t usable[HEAP_BLOCKS];
  api_rng_t rng = {0x1234567887654321ULL};
  for (int i = 0; i < HEAP_BLOCKS; i++) {
    size_t n = (size_t)(api_rng_next(&rng) % HEAP_MAX_SIZE);
    if (i % 1000 == 999) n = 200 * KiB + (size_t)i; /* a few large ones among them */
    blocks[i] = malloc(opaque_size(n));
    REQUIRE(blocks[i] != NULL);
    usable[i] = malloc_usable_size(blocks[i]);
    CHECK(usable[i] >= n);
    pattern_fill(blocks[i], usable[i], (uintptr_t)i);
  }
  unsigned long bad = 0;
  for (int i = 0; i < HEAP_BLOCKS; i++) {
    size_t at = pattern_find_mismatch(blocks[i], usable[i], (uintptr_t)i);
    if (at != usable[i] && bad++ < 5)
      NOTE("  block %d (%p, usable %zu) overwritten at byte %zu\n", i, blocks[i], usable[i], at);
  }
  CHECK(bad == 0);
  /* Free every other block, reallocate, and check again that nothing overlaps. */
  for (int i = 0; i < HEAP_BLOCKS; i += 2)
    free(blocks[i]);
  for (int i = 0; i < HEAP_BLOCKS; i += 2) {
    blocks[i] = malloc(opaque_size((size_t)(api_rng_next(&rng) % HEAP_MAX_SIZE)));
    REQUIRE(blocks[i] != NULL);
    usable[i] = malloc_usable_size(blocks[i]);
    pattern_fill(blocks[i], usable[i], (uintptr_t)i + HEAP_BLOCKS);
  }
  bad = 0;
  for (int i = 0; i < HEAP_BLOCKS; i++) {
    uintptr_t tag = (uintptr_t)i + (i % 2 == 0 ? HEAP_BLOCKS : 0);
    if (!pattern_ok(blocks[i], usable[i], tag)) bad++;
  }
  CHECK(bad == 0);
  for (int i = 0; i < HEAP_BLOCKS; i++)
    free(blocks[i]);
}

int main(void) {
  api_begin("malloc_basic");
  test_malloc_zero();
  test_alignment();
  test_usable_size();
  test_free_null_and_errno();
  test_live_heap();
  return api_end();
}
