/*
 * glibc's internal names of the allocator, which some programs and libraries call directly
 * (often from their own malloc wrappers): __libc_malloc, __libc_free, __libc_calloc,
 * __libc_realloc, __libc_memalign. With magpie in use they must be magpie's, so blocks cross
 * freely between them and the standard names.
 */
#include "check.h"

#include <malloc.h>

extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static const char *const alias_names[] = {"__libc_malloc", "__libc_free", "__libc_calloc",
                                          "__libc_realloc", "__libc_memalign"};

static void test_resolution(void) {
  if (!api_magpie_loaded()) return;
  for (size_t i = 0; i < sizeof alias_names / sizeof alias_names[0]; i++) {
    int ok = api_symbol_is_magpie(alias_names[i]);
    if (!ok)
      NOTE("  %s resolves to %s, not to libmagpie\n", alias_names[i],
           api_object_of(dlsym(RTLD_DEFAULT, alias_names[i])));
    CHECK(ok);
  }
}

static void test_crossing(void) {
  size_t sizes[] = {0, 1, 24, 100, 1000, 8192, 100 * KiB, 2 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    /* __libc_malloc -> free */
    unsigned char *p = __libc_malloc(opaque_size(n));
    REQUIRE(p != NULL);
    size_t usable = malloc_usable_size(p);
    CHECK(usable >= n);
    memset(p, 0x61, usable);
    free(p);
    /* malloc -> __libc_free */
    p = malloc(opaque_size(n));
    REQUIRE(p != NULL);
    memset(p, 0x62, n);
    __libc_free(p);
    /* __libc_calloc: zeroed, freed by free */
    p = __libc_calloc(1, opaque_size(n));
    REQUIRE(p != NULL);
    CHECK(all_bytes_are(p, n, 0));
    free(p);
    /* __libc_realloc of a malloc block keeps contents, and back. */
    p = malloc(opaque_size(n + 1));
    REQUIRE(p != NULL);
    pattern_fill(p, n + 1, n);
    unsigned char *q = __libc_realloc(p, opaque_size(2 * n + 10));
    REQUIRE(q != NULL);
    CHECK(pattern_ok(q, n + 1, n));
    p = realloc(q, opaque_size(n + 1));
    REQUIRE(p != NULL);
    CHECK(pattern_ok(p, n + 1, n));
    __libc_free(p);
    /* __libc_memalign: aligned, usable, freed by free */
    for (size_t a = 16; a <= 64 * KiB; a *= 16) {
      p = __libc_memalign(opaque_size(a), opaque_size(n));
      REQUIRE(p != NULL);
      CHECK(is_aligned(p, a));
      CHECK(malloc_usable_size(p) >= n);
      memset(p, 0x63, n);
      free(p);
    }
  }
  /* A usable size seen through either name is the same. */
  void *p = __libc_malloc(opaque_size(777));
  REQUIRE(p != NULL);
  size_t usable = malloc_usable_size(p);
  void *q = realloc(p, opaque_size(usable)); /* within the usable size: contents stay */
  REQUIRE(q != NULL);
  CHECK(malloc_usable_size(q) >= usable);
  __libc_free(q);
}

int main(void) {
  api_begin("libc_aliases");
  test_resolution();
  test_crossing();
  return api_end();
}
