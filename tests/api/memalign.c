/*
 * Aligned allocation: posix_memalign, aligned_alloc, memalign, valloc, pvalloc.
 *
 * posix_memalign reports errors by return value (EINVAL for an alignment that is 0, not a
 * power of two, or not a multiple of sizeof(void *)); aligned_alloc and memalign return NULL with
 * errno EINVAL for an alignment that is 0 or not a power of two (C17 / glibc >= 2.38 for
 * aligned_alloc; the project contract extends it to memalign, which glibc 2.36 instead rounds
 * up). Every power of two up to 1 GiB must work, the result aligned and writable.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#define MAX_ALIGN_SHIFT 30        /* alignments up to 1 GiB */
#define WRITE_ALL_LIMIT (1 * MiB) /* write whole usable sizes up to this; beyond, the ends */

/* Writes the whole block (up to a limit, then its last bytes) and checks the usable size. */
static void check_usable_block(void *p, size_t n) {
  size_t usable = malloc_usable_size(p);
  CHECK(usable >= n);
  if (usable <= WRITE_ALL_LIMIT) {
    memset(p, 0x3c, usable);
  } else {
    memset(p, 0x3c, WRITE_ALL_LIMIT);
    memset((unsigned char *)p + usable - 4096, 0x3c, 4096);
  }
}

/* The sizes tried with alignment a: small ones always, a size equal to the alignment and one
 * that is not a multiple of it while that is cheap. */
static size_t sizes_for(size_t a, size_t out[4]) {
  size_t k = 0;
  out[k++] = 0;
  out[k++] = 1;
  out[k++] = 100;
  if (a <= 4 * MiB) out[k++] = a + a / 2 + 3;
  return k;
}

static void test_posix_memalign(void) {
  void *p = NULL;
  size_t bad[] = {0, 1, 2, 3, 4, 6, 12, 24, 48, 100, 4095, 4097, 3 * 4096, (size_t)1 << 63 | 8};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = posix_memalign(&p, opaque_size(bad[i]), opaque_size(64));
    if (rc != EINVAL) NOTE("  posix_memalign(align %zu) = %d\n", bad[i], rc);
    CHECK(rc == EINVAL);
    if (rc == 0) free(p);
  }
  /* An impossible size: ENOMEM returned, and in errno too, as glibc does (programs read it). */
  p = &p;
  errno = 0;
  int failed = posix_memalign(&p, opaque_size(64), opaque_size(SIZE_MAX - 4096));
  CHECK(failed == ENOMEM);
  CHECK(errno == ENOMEM);
  CHECK(p == (void *)&p); /* *out untouched on failure */
  /* On success only the return value is specified: only that is checked. */
  for (int shift = 3; shift <= MAX_ALIGN_SHIFT; shift++) {
    size_t a = (size_t)1 << shift;
    size_t sizes[4];
    size_t k = sizes_for(a, sizes);
    for (size_t s = 0; s < k; s++) {
      p = NULL;
      int rc = posix_memalign(&p, opaque_size(a), opaque_size(sizes[s]));
      if (rc != 0) NOTE("  posix_memalign(align %zu, size %zu) = %d\n", a, sizes[s], rc);
      CHECK(rc == 0);
      if (rc != 0) continue;
      /* Size 0: NULL or a unique pointer (POSIX); a pointer must be aligned. */
      if (sizes[s] == 0 && p == NULL) continue;
      REQUIRE(p != NULL);
      if (!is_aligned(p, a)) NOTE("  posix_memalign(%zu, %zu) = %p\n", a, sizes[s], p);
      CHECK(is_aligned(p, a));
      check_usable_block(p, sizes[s]);
      free(p);
    }
  }
  /* Two live blocks with the same large alignment do not overlap. */
  void *x = NULL, *y = NULL;
  REQUIRE(posix_memalign(&x, opaque_size(64 * KiB), opaque_size(64 * KiB)) == 0);
  REQUIRE(posix_memalign(&y, opaque_size(64 * KiB), opaque_size(64 * KiB)) == 0);
  pattern_fill(x, 64 * KiB, 1);
  pattern_fill(y, 64 * KiB, 2);
  CHECK(pattern_ok(x, 64 * KiB, 1));
  CHECK(pattern_ok(y, 64 * KiB, 2));
  free(x);
  free(y);
}

typedef void *aligned_fn(size_t alignment, size_t size);

static void check_aligned_function(const char *name, aligned_fn *fn) {
  size_t bad[] = {0, 3, 5, 6, 12, 24, 48, 100, 4095, 4097, 3 * 4096, (size_t)1 << 63 | 8};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    errno = 0;
    void *p = fn(opaque_size(bad[i]), opaque_size(64));
    int err = errno;
    if (p != NULL || err != EINVAL)
      NOTE("  %s(align %zu, 64) = %p, errno %d (wanted NULL, EINVAL)\n", name, bad[i], p, err);
    CHECK(p == NULL);
    CHECK(err == EINVAL);
    if (p != NULL) free(p);
  }
  for (int shift = 0; shift <= MAX_ALIGN_SHIFT; shift++) {
    size_t a = (size_t)1 << shift;
    size_t sizes[4];
    size_t k = sizes_for(a, sizes);
    for (size_t s = 0; s < k; s++) {
      void *p = fn(opaque_size(a), opaque_size(sizes[s]));
      if (p == NULL) {
        /* glibc returns a unique pointer for size 0; so must we. */
        NOTE("  %s(%zu, %zu) = NULL, errno %d\n", name, a, sizes[s], errno);
        CHECK(p != NULL);
        continue;
      }
      if (!is_aligned(p, a)) NOTE("  %s(%zu, %zu) = %p\n", name, a, sizes[s], p);
      CHECK(is_aligned(p, a));
      check_usable_block(p, sizes[s]);
      free(p);
    }
  }
}

static void test_valloc_pvalloc(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t sizes[] = {1, 100, 4095, 4096, 4097, 3 * 4096 + 1, 100 * KiB, 3 * MiB + 5};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    void *p = valloc(opaque_size(n));
    REQUIRE(p != NULL);
    CHECK(is_aligned(p, page));
    check_usable_block(p, n);
    free(p);

    p = pvalloc(opaque_size(n));
    REQUIRE(p != NULL);
    CHECK(is_aligned(p, page));
    size_t rounded = (n + page - 1) / page * page;
    size_t usable = malloc_usable_size(p);
    if (usable < rounded) NOTE("  pvalloc(%zu): usable %zu < %zu\n", n, usable, rounded);
    CHECK(usable >= rounded);
    check_usable_block(p, rounded);
    free(p);
  }
  /* pvalloc(0) gives one page. */
  void *p = pvalloc(opaque_size(0));
  REQUIRE(p != NULL);
  CHECK(is_aligned(p, page));
  if (malloc_usable_size(p) < page)
    NOTE("  pvalloc(0): usable size %zu, wanted a page\n", malloc_usable_size(p));
  REQUIRE(malloc_usable_size(p) >= page);
  memset(p, 0x77, page);
  free(p);
  /* valloc(0): a unique page-aligned pointer (glibc). */
  void *v1 = valloc(opaque_size(0)), *v2 = valloc(opaque_size(0));
  CHECK(v1 != NULL && v2 != NULL && v1 != v2);
  CHECK(is_aligned(v1, page) && is_aligned(v2, page));
  free(v1);
  free(v2);
}

int main(void) {
  api_begin("memalign");
  test_posix_memalign();
  check_aligned_function("aligned_alloc", aligned_alloc);
  check_aligned_function("memalign", memalign);
  test_valloc_pvalloc();
  return api_end();
}
