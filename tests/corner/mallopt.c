/*
 * mallopt and the legacy mallinfo, as programs written for glibc call them.
 *   - mallopt: glibc returns 1 when it accepts a setting (mallopt(3)); programs tune the common
 *     parameters at start-up and some check the result. magpie accepts them all (MAGPIE_OPTIONS
 *     is its own interface) and must keep allocating correctly afterwards.
 *   - mallinfo: the same figures as mallinfo2 in int fields. Taken between two mallinfo2 calls,
 *     each field lies between the two mallinfo2 values; live memory shows in uordblks. Past
 *     INT_MAX magpie saturates the fields (glibc's wrap around, which is why mallinfo2 exists):
 *     with 3 GiB in untouched large blocks, the large-block and in-use figures read INT_MAX.
 */
#include "blocks.h"

#include <limits.h>
#include <malloc.h>

#define HELD (8 * MiB) /* live small blocks while the figures are compared */
#define HELD_BLOCK 200
#define HUGE_BLOCKS 3 /* of 1 GiB each, never touched: address space, not memory */

static void test_mallopt(void) {
  static const struct {
    int param, value;
    const char *name;
  } settings[] = {
      {M_MXFAST, 64, "M_MXFAST"},          {M_TRIM_THRESHOLD, 256 * 1024, "M_TRIM_THRESHOLD"},
      {M_TOP_PAD, 64 * 1024, "M_TOP_PAD"}, {M_MMAP_THRESHOLD, 512 * 1024, "M_MMAP_THRESHOLD"},
      {M_MMAP_MAX, 65536, "M_MMAP_MAX"},   {M_ARENA_TEST, 8, "M_ARENA_TEST"},
      {M_ARENA_MAX, 2, "M_ARENA_MAX"},     {M_PERTURB, 0, "M_PERTURB"},
  };
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    int rc = mallopt(settings[i].param, settings[i].value);
    if (rc != 1) NOTE("  mallopt(%s, %d) returned %d\n", settings[i].name, settings[i].value, rc);
    CHECK(rc == 1);
  }
  /* A fastbin limit out of glibc's range (0 .. 80 * sizeof(size_t) / 4) is refused. */
  CHECK(mallopt(M_MXFAST, 1000) == 0);
  CHECK(mallopt(M_MXFAST, -1) == 0);
  /* Allocation is unchanged by the settings. */
  api_rng_t rng = {77};
  enum { COUNT = 2000 };
  static void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = block_new(block_size(&rng), (uintptr_t)i);
    REQUIRE(blocks[i] != NULL);
  }
  unsigned long bad = 0;
  for (int i = 0; i < COUNT; i++) {
    bad += !block_ok(blocks[i]);
    free(blocks[i]);
  }
  CHECK(bad == 0);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* mallinfo is what is under test */
static struct mallinfo legacy_mallinfo(void) {
  return mallinfo();
}
#pragma GCC diagnostic pop

static long long clamp_int(size_t v) {
  return v > INT_MAX ? INT_MAX : (long long)v;
}

/* Field `f` of legacy mallinfo `mi` lies between its values in mallinfo2 `a` and `b`. */
#define BETWEEN(mi, a, b, f)                                                                       \
  ((long long)(mi).f >= clamp_int((a).f < (b).f ? (a).f : (b).f) &&                                \
   (long long)(mi).f <= clamp_int((a).f < (b).f ? (b).f : (a).f))

static void compare(const char *when) {
  struct mallinfo2 a = mallinfo2();
  struct mallinfo mi = legacy_mallinfo();
  struct mallinfo2 b = mallinfo2();
  int ok = BETWEEN(mi, a, b, arena) && BETWEEN(mi, a, b, ordblks) && BETWEEN(mi, a, b, smblks) &&
           BETWEEN(mi, a, b, hblks) && BETWEEN(mi, a, b, hblkhd) && BETWEEN(mi, a, b, usmblks) &&
           BETWEEN(mi, a, b, fsmblks) && BETWEEN(mi, a, b, uordblks) &&
           BETWEEN(mi, a, b, fordblks) && BETWEEN(mi, a, b, keepcost);
  if (!ok)
    NOTE("  %s: mallinfo arena %d hblks %d hblkhd %d uordblks %d fordblks %d; mallinfo2 arena "
         "%zu hblks %zu hblkhd %zu uordblks %zu fordblks %zu\n",
         when, mi.arena, mi.hblks, mi.hblkhd, mi.uordblks, mi.fordblks, a.arena, a.hblks, a.hblkhd,
         a.uordblks, a.fordblks);
  CHECK(ok);
}

static void test_mallinfo(void) {
  size_t count = HELD / HELD_BLOCK;
  void **blocks = malloc(count * sizeof *blocks);
  REQUIRE(blocks != NULL);
  compare("at start");
  int before = legacy_mallinfo().uordblks;
  for (size_t i = 0; i < count; i++) {
    blocks[i] = malloc(opaque_size(HELD_BLOCK));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], 1, HELD_BLOCK);
  }
  struct mallinfo held = legacy_mallinfo();
  compare("8 MiB held");
  CHECK(held.uordblks >= before + (int)HELD);
  CHECK(held.uordblks <= held.arena + held.hblkhd);
  for (size_t i = 0; i < count; i++)
    free(blocks[i]);
  free(blocks);
  CHECK(legacy_mallinfo().uordblks + (int)HELD / 2 <= held.uordblks);

  void *huge[HUGE_BLOCKS];
  for (int i = 0; i < HUGE_BLOCKS; i++) {
    huge[i] = malloc(opaque_size(GiB));
    REQUIRE(huge[i] != NULL);
  }
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo mi = legacy_mallinfo();
  CHECK(m2.hblkhd >= HUGE_BLOCKS * GiB);
  if (api_magpie_loaded()) { /* glibc leaves mmapped blocks out of uordblks, magpie counts them */
    CHECK(m2.uordblks >= HUGE_BLOCKS * GiB);
    CHECK(mi.hblkhd == INT_MAX);
    CHECK(mi.uordblks == INT_MAX);
    CHECK(mi.hblks >= HUGE_BLOCKS);
  }
  for (int i = 0; i < HUGE_BLOCKS; i++)
    free(huge[i]);
  compare("after the huge blocks");
}

int main(void) {
  api_begin("mallopt");
  test_mallopt();
  test_mallinfo();
  return api_end();
}
