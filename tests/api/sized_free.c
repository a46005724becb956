/*
 * C23 free_sized(p, size) and free_aligned_sized(p, alignment, size).
 *
 * glibc 2.36's headers lack them, so they are declared here, weak: the plain build then links
 * against glibc and finds them at run time in the preloaded libmagpie. When magpie is the malloc
 * in use, both must exist. That the memory is really given back is checked through mallinfo2():
 * the in-use figure must fall after 10 MiB of blocks are freed with the sized functions.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>

extern void free_sized(void *ptr, size_t size) __attribute__((weak));
extern void free_aligned_sized(void *ptr, size_t alignment, size_t size) __attribute__((weak));

#define VOLUME (10 * MiB) /* bytes freed by each "really freed" check */

static void test_free_sized(void) {
  free_sized(NULL, 0);
  free_sized(NULL, opaque_size(100));
  size_t sizes[] = {0, 1, 7, 8, 16, 17, 100, 1000, 4096, 5000, 65536, 300 * KiB, 4 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (int r = 0; r < 100; r++) {
      void *p = malloc(opaque_size(sizes[i]));
      REQUIRE(p != NULL);
      memset(p, 0x42, sizes[i]);
      errno = 1234;
      free_sized(p, sizes[i]);
      CHECK(errno == 1234);
    }
    /* calloc's size is count * size. */
    void *c = calloc(opaque_size(3), opaque_size(sizes[i]));
    REQUIRE(c != NULL);
    free_sized(c, 3 * sizes[i]);
  }
}

static void test_free_aligned_sized(void) {
  free_aligned_sized(NULL, 64, 0);
  for (size_t a = 1; a <= 1 * MiB; a *= 4) {
    size_t sizes[] = {a, 2 * a, 5 * a};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      void *p = aligned_alloc(opaque_size(a), opaque_size(sizes[i]));
      REQUIRE(p != NULL);
      CHECK(is_aligned(p, a));
      memset(p, 0x24, sizes[i]);
      errno = 1234;
      free_aligned_sized(p, a, sizes[i]);
      CHECK(errno == 1234);
    }
  }
}

/* The in-use figure falls by at least half of what `release` gave back. */
typedef void release_fn(void **blocks, size_t count, size_t size);

static void release_sized(void **blocks, size_t count, size_t size) {
  for (size_t i = 0; i < count; i++)
    free_sized(blocks[i], size);
}

static void release_aligned_sized(void **blocks, size_t count, size_t size) {
  for (size_t i = 0; i < count; i++)
    free_aligned_sized(blocks[i], 64, size);
}

static void check_really_freed(const char *name, release_fn *release, int aligned, size_t size) {
  size_t count = VOLUME / size;
  void **blocks = malloc(count * sizeof *blocks);
  REQUIRE(blocks != NULL);
  for (size_t i = 0; i < count; i++) {
    blocks[i] = aligned ? aligned_alloc(64, opaque_size(size)) : malloc(opaque_size(size));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], 1, size);
  }
  size_t during = mallinfo2().uordblks;
  release(blocks, count, size);
  size_t after = mallinfo2().uordblks;
  if (!(after + VOLUME / 2 <= during))
    NOTE("  %s of %zu x %zu bytes: in use %zu before, %zu after\n", name, count, size, during,
         after);
  CHECK(after + VOLUME / 2 <= during);
  free(blocks);
}

int main(void) {
  api_begin("sized_free");
  if (free_sized == NULL || free_aligned_sized == NULL) {
    if (api_magpie_loaded()) {
      CHECK(free_sized != NULL);
      CHECK(free_aligned_sized != NULL);
    } else {
      fprintf(stderr, "sized_free: the system malloc lacks free_sized; nothing to test\n");
    }
    return api_end();
  }
  CHECK(!api_magpie_loaded() || api_symbol_is_magpie("free_sized"));
  CHECK(!api_magpie_loaded() || api_symbol_is_magpie("free_aligned_sized"));
  test_free_sized();
  test_free_aligned_sized();
  check_really_freed("free_sized", release_sized, 0, 64);
  check_really_freed("free_sized", release_sized, 0, 640);
  check_really_freed("free_aligned_sized", release_aligned_sized, 1, 192);
  return api_end();
}
