/*
 * Impossible sizes: every allocation function fails with NULL and errno ENOMEM (posix_memalign:
 * the return value) for sizes no object can have, including sizes whose rounding up to a size
 * class, a page or an alignment would wrap around; realloc and reallocarray leave the old block
 * valid and intact when they fail.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>

#define KEEP_SIZE 1000 /* the block that failed reallocs must leave intact */

/* Sizes above PTRDIFF_MAX (no object may be that large) and sizes just below SIZE_MAX, where
 * rounding up overflows. PTRDIFF_MAX itself is a valid request that no 64-bit address space
 * can satisfy. */
static const size_t impossible_sizes[] = {
    SIZE_MAX,
    SIZE_MAX - 1,
    SIZE_MAX - 15,
    SIZE_MAX - 16,
    SIZE_MAX - 4095,
    SIZE_MAX - 4096,
    SIZE_MAX - (2 << 20),
    SIZE_MAX - (1ULL << 30),
    (size_t)PTRDIFF_MAX + 1,
    (size_t)PTRDIFF_MAX,
    (size_t)PTRDIFF_MAX - 4095,
    SIZE_MAX / 2 + 4096,
};
#define NUM_IMPOSSIBLE (sizeof impossible_sizes / sizeof impossible_sizes[0])

static void report_size(const char *fn, size_t n, const void *p, int err) {
  if (p != NULL || err != ENOMEM)
    NOTE("  %s(%#zx) = %p, errno %d (wanted NULL, ENOMEM %d)\n", fn, n, p, err, ENOMEM);
}

static void test_malloc(void) {
  for (size_t i = 0; i < NUM_IMPOSSIBLE; i++) {
    size_t n = opaque_size(impossible_sizes[i]);
    errno = 0;
    void *p = malloc(n);
    int err = errno;
    report_size("malloc", n, p, err);
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    if (p != NULL) free(p);
  }
  /* The two the brief names, spelled out. */
  errno = 0;
  CHECK(malloc(opaque_size(SIZE_MAX)) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(malloc(opaque_size((size_t)PTRDIFF_MAX + 1)) == NULL && errno == ENOMEM);
}

static void test_calloc(void) {
  struct {
    size_t count, size;
  } cases[] = {
      {SIZE_MAX / 2 + 1, 4}, /* 2^65: wraps to 0 */
      {SIZE_MAX / 2 + 1, 2}, /* 2^64: wraps to 0 */
      {4, SIZE_MAX / 2 + 1},
      {SIZE_MAX, SIZE_MAX},
      {((size_t)1 << 32) + 1, (size_t)1 << 32}, /* wraps to 2^32: small if unchecked */
      {1, SIZE_MAX},
      {SIZE_MAX, 1},
      {(size_t)PTRDIFF_MAX / 8 + 1, 8},
      {16, SIZE_MAX / 16 + 1}, /* wraps to 0 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    errno = 0;
    void *p = calloc(opaque_size(cases[i].count), opaque_size(cases[i].size));
    int err = errno;
    if (p != NULL || err != ENOMEM)
      NOTE("  calloc(%#zx, %#zx) = %p, errno %d\n", cases[i].count, cases[i].size, p, err);
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    if (p != NULL) free(p);
  }
}

static void test_realloc(void) {
  unsigned char *keep = malloc(opaque_size(KEEP_SIZE));
  REQUIRE(keep != NULL);
  pattern_fill(keep, KEEP_SIZE, 7);
  for (size_t i = 0; i < NUM_IMPOSSIBLE; i++) {
    size_t n = opaque_size(impossible_sizes[i]);
    errno = 0;
    void *p = realloc(opaque_ptr(keep), n);
    int err = errno;
    report_size("realloc", n, p, err);
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    REQUIRE(p == NULL); /* otherwise keep is gone */
    CHECK(pattern_ok(keep, KEEP_SIZE, 7));
  }
  /* realloc(NULL, impossible) is malloc(impossible). */
  errno = 0;
  CHECK(realloc(NULL, opaque_size(SIZE_MAX)) == NULL);
  CHECK(errno == ENOMEM);
  /* The old block still works as a block: it can grow and be freed. */
  unsigned char *grown = realloc(keep, opaque_size(4 * KEEP_SIZE));
  REQUIRE(grown != NULL);
  CHECK(pattern_ok(grown, KEEP_SIZE, 7));
  free(grown);

  /* The same with a large block (large path). */
  size_t large = 3 * MiB;
  unsigned char *big = malloc(opaque_size(large));
  REQUIRE(big != NULL);
  pattern_fill(big, large, 9);
  errno = 0;
  CHECK(realloc(big, opaque_size(SIZE_MAX)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(realloc(big, opaque_size((size_t)PTRDIFF_MAX + 1)) == NULL);
  CHECK(errno == ENOMEM);
  CHECK(pattern_ok(big, large, 9));
  free(big);
}

static void test_reallocarray(void) {
  errno = 0;
  CHECK(reallocarray(NULL, opaque_size(SIZE_MAX / 2 + 1), opaque_size(4)) == NULL);
  CHECK(errno == ENOMEM);
  unsigned char *keep = reallocarray(NULL, opaque_size(10), opaque_size(100));
  REQUIRE(keep != NULL);
  pattern_fill(keep, KEEP_SIZE, 11);
  size_t cases[][2] = {{SIZE_MAX / 2 + 1, 4},
                       {SIZE_MAX, SIZE_MAX},
                       {4, SIZE_MAX / 4 + 1},
                       {((size_t)1 << 33), ((size_t)1 << 31)}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    errno = 0;
    void *p = reallocarray(opaque_ptr(keep), opaque_size(cases[i][0]), opaque_size(cases[i][1]));
    int err = errno;
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    REQUIRE(p == NULL);
    CHECK(pattern_ok(keep, KEEP_SIZE, 11));
  }
  free(keep);
}

static void test_aligned(void) {
  for (size_t i = 0; i < NUM_IMPOSSIBLE; i++) {
    size_t n = opaque_size(impossible_sizes[i]);
    size_t alignments[] = {16, 64, 4096, 2 * MiB};
    for (size_t j = 0; j < sizeof alignments / sizeof alignments[0]; j++) {
      size_t a = opaque_size(alignments[j]);
      void *p = (void *)1;
      int rc = posix_memalign(&p, a, n);
      if (rc != ENOMEM) NOTE("  posix_memalign(%zu, %#zx) = %d\n", a, n, rc);
      CHECK(rc == ENOMEM);
      if (rc == 0) free(p);

      errno = 0;
      p = aligned_alloc(a, n);
      int err = errno;
      report_size("aligned_alloc", n, p, err);
      CHECK(p == NULL && err == ENOMEM);
      if (p != NULL) free(p);

      errno = 0;
      p = memalign(a, n);
      err = errno;
      report_size("memalign", n, p, err);
      CHECK(p == NULL && err == ENOMEM);
      if (p != NULL) free(p);
    }
    errno = 0;
    void *p = valloc(n);
    int err = errno;
    report_size("valloc", n, p, err);
    CHECK(p == NULL && err == ENOMEM);
    if (p != NULL) free(p);

    errno = 0;
    p = pvalloc(n);
    err = errno;
    report_size("pvalloc", n, p, err);
    CHECK(p == NULL && err == ENOMEM);
    if (p != NULL) free(p);
  }
}

int main(void) {
  api_begin("limits");
  test_malloc();
  test_calloc();
  test_realloc();
  test_reallocarray();
  test_aligned();
  /* Failures must leave the allocator working. */
  void *after = malloc(opaque_size(100));
  CHECK(after != NULL);
  free(after);
  return api_end();
}
