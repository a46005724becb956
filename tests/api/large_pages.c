/*
 * What large blocks cost in pages (magpie's policy, not a standard's; mincore counts pages).
 *
 * 1. calloc of a block of fresh pages up to calloc_populate bytes maps them all at once; a
 *    bigger block stays lazy. Run with argument "populate" under the default options, and with
 *    "lazy" under MAGPIE_OPTIONS=calloc_populate=0, where no calloc populates.
 * 2. A freed large block's resident pages serve the next bigger request: the free span is
 *    regrown (mremap) rather than a fresh one mapped, so the new block starts resident.
 */
#include "check.h"

#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096u

/* Resident pages of [p, p + size). */
static size_t resident_pages(void *p, size_t size) {
  uintptr_t start = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
  size_t pages = ((uintptr_t)p + size - start + PAGE - 1) / PAGE, n = 0;
  static unsigned char vec[(256u << 20) / PAGE];
  REQUIRE(pages <= sizeof vec);
  REQUIRE(mincore((void *)start, pages * PAGE, vec) == 0);
  for (size_t i = 0; i < pages; i++)
    n += vec[i] & 1;
  return n;
}

/* Checks that a block of size bytes has about `want` pages resident (within a few pages; at
   least `want` if it is not 0). */
static void expect_resident(const char *what, size_t size, size_t got, size_t want) {
  int ok = want == 0 ? got <= 16 : got + 16 >= want;
  CHECK(ok);
  if (!ok)
    NOTE("%s(%zu): %zu pages resident, expected %s%zu\n", what, size, got,
         want ? "at least about " : "about ", want);
}

/* Whether this kernel has MADV_POPULATE_WRITE (5.14 and later); without it calloc stays lazy. */
static int kernel_populates(void) {
  void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  int ok = madvise(p, PAGE, MADV_POPULATE_WRITE) == 0;
  munmap(p, PAGE);
  return ok;
}

static void test_calloc(int populate) {
  size_t small = 24 * MiB, big = 160 * MiB; /* either side of the 64 MiB default */
  unsigned char *p = calloc(1, opaque_size(small));
  REQUIRE(p != NULL);
  size_t got = resident_pages(p, small);
  expect_resident("calloc", small, got, populate ? small / PAGE : 0);
  CHECK(p[0] == 0 && p[small / 2] == 0 && p[small - 1] == 0);
  unsigned char *q = calloc(1, opaque_size(big));
  REQUIRE(q != NULL);
  expect_resident("calloc", big, resident_pages(q, big), 0);
  CHECK(q[0] == 0 && q[big / 2] == 0 && q[big - 1] == 0);
  free(q);
  free(p);
}

static void test_regrow(void) {
  size_t first = 40 * MiB, second = 56 * MiB;
  unsigned char *p = malloc(opaque_size(first));
  REQUIRE(p != NULL);
  memset(p, 0x5a, first);
  free(p);
  unsigned char *q = malloc(opaque_size(second));
  REQUIRE(q != NULL);
  expect_resident("malloc after a free", second, resident_pages(q, second), first / PAGE);
  memset(q, 0x33, second);
  CHECK(q[0] == 0x33 && q[second - 1] == 0x33);
  free(q);
}

int main(int argc, char **argv) {
  api_begin("large_pages");
  REQUIRE(argc == 2 && (strcmp(argv[1], "populate") == 0 || strcmp(argv[1], "lazy") == 0));
  int populate = strcmp(argv[1], "populate") == 0;
  if (populate && !kernel_populates()) {
    printf("large_pages: this kernel has no MADV_POPULATE_WRITE; calloc stays lazy here\n");
    populate = 0;
  }
  test_calloc(populate);
  test_regrow();
  return api_end();
}
