/*
 * The allocator under its own names (magpie_malloc and the rest of include/magpie.h) behaves like
 * the standard functions, and, with magpie interposed, blocks cross between the two sets of
 * names. Also magpie_trim and magpie_stats_write.
 */
#include "check.h"

#include <errno.h>
#include <magpie.h>
#include <malloc.h>
#include <unistd.h>

static void test_malloc_free(void) {
  void *z1 = magpie_malloc(opaque_size(0)), *z2 = magpie_malloc(opaque_size(0));
  CHECK(z1 != NULL && z2 != NULL && z1 != z2);
  magpie_free(z1);
  magpie_free(z2);
  magpie_free(NULL);
  for (size_t n = 1; n <= 64 * MiB; n = n < 4096 ? n + 1 : n * 2 + 1) {
    unsigned char *p = magpie_malloc(opaque_size(n));
    REQUIRE(p != NULL);
    CHECK(is_aligned(p, n >= 16 ? 16 : (n >= 8 ? 8 : (n >= 4 ? 4 : (n >= 2 ? 2 : 1)))));
    size_t usable = magpie_usable_size(p);
    CHECK(usable >= n);
    CHECK(usable == malloc_usable_size(p));
    memset(p, 0x19, n < 1 * MiB ? usable : n);
    errno = 4321;
    magpie_free(p);
    CHECK(errno == 4321);
  }
  CHECK(magpie_usable_size(NULL) == 0);
  errno = 0;
  CHECK(magpie_malloc(opaque_size(SIZE_MAX)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(magpie_malloc(opaque_size((size_t)PTRDIFF_MAX + 1)) == NULL);
  CHECK(errno == ENOMEM);
}

static void test_calloc(void) {
  for (size_t n = 1; n <= 16 * MiB; n = n * 3 + 1) {
    unsigned char *d = magpie_malloc(opaque_size(n));
    REQUIRE(d != NULL);
    memset(d, 0xAA, n);
    magpie_free(d);
    unsigned char *z = magpie_calloc(1, opaque_size(n));
    REQUIRE(z != NULL);
    CHECK(all_bytes_are(z, n, 0));
    magpie_free(z);
  }
  errno = 0;
  CHECK(magpie_calloc(opaque_size(SIZE_MAX / 2 + 1), opaque_size(4)) == NULL);
  CHECK(errno == ENOMEM);
}

static void test_realloc(void) {
  unsigned char *p = magpie_realloc(NULL, opaque_size(10));
  REQUIRE(p != NULL);
  pattern_fill(p, 10, 5);
  size_t sizes[] = {100, 5000, 2 * MiB, 40, 3 * MiB, 8};
  size_t len = 10;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *q = magpie_realloc(p, opaque_size(sizes[i]));
    REQUIRE(q != NULL);
    size_t keep = len < sizes[i] ? len : sizes[i];
    CHECK(pattern_ok(q, keep, 5));
    pattern_fill(q, sizes[i], 5);
    p = q;
    len = sizes[i];
  }
  errno = 0;
  CHECK(magpie_realloc(p, opaque_size(SIZE_MAX)) == NULL);
  CHECK(errno == ENOMEM);
  CHECK(pattern_ok(p, len, 5));
  /* realloc(p, 0) frees p and returns NULL, as glibc's. */
  CHECK(magpie_realloc(p, opaque_size(0)) == NULL);
}

static void test_aligned(void) {
  void *p = (void *)1;
  CHECK(magpie_posix_memalign(&p, opaque_size(0), 8) == EINVAL);
  CHECK(magpie_posix_memalign(&p, opaque_size(4), 8) == EINVAL);
  CHECK(magpie_posix_memalign(&p, opaque_size(24), 8) == EINVAL);
  errno = 0;
  CHECK(magpie_aligned_alloc(opaque_size(0), 8) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(magpie_aligned_alloc(opaque_size(48), 8) == NULL && errno == EINVAL);
  for (size_t a = 1; a <= 1 * GiB; a *= 2) {
    void *x = magpie_aligned_alloc(opaque_size(a), opaque_size(a <= MiB ? a : 64));
    REQUIRE(x != NULL);
    CHECK(is_aligned(x, a));
    memset(x, 1, a <= MiB ? a : 64);
    magpie_free(x);
    if (a >= sizeof(void *)) {
      void *y = NULL;
      CHECK(magpie_posix_memalign(&y, opaque_size(a), opaque_size(100)) == 0);
      REQUIRE(y != NULL);
      CHECK(is_aligned(y, a));
      memset(y, 2, 100);
      magpie_free(y);
    }
  }
}

/* With magpie interposed, magpie_* and the standard names are one allocator. */
static void test_crossing(void) {
  size_t sizes[] = {1, 100, 5000, 3 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = magpie_malloc(opaque_size(sizes[i]));
    REQUIRE(p != NULL);
    CHECK(malloc_usable_size(p) >= sizes[i]);
    free(p);
    p = malloc(opaque_size(sizes[i]));
    REQUIRE(p != NULL);
    CHECK(magpie_usable_size(p) >= sizes[i]);
    magpie_free(p);
    p = aligned_alloc(opaque_size(256), opaque_size(sizes[i]));
    REQUIRE(p != NULL);
    p = magpie_realloc(p, opaque_size(sizes[i] * 2));
    REQUIRE(p != NULL);
    free(p);
  }
}

static void test_trim(void) {
  enum { COUNT = 2000 };
  static void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = magpie_malloc(opaque_size(i % 10 == 0 ? 256 * KiB : 1000));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], 4, 1000);
  }
  for (int i = 0; i < COUNT; i++) {
    if (i % 10 == 1)
      pattern_fill(blocks[i], 1000, (uintptr_t)i);
    else
      magpie_free(blocks[i]);
  }
  size_t released = magpie_trim();
  unsigned long damaged = 0;
  for (int i = 1; i < COUNT; i += 10) {
    if (!pattern_ok(blocks[i], 1000, (uintptr_t)i)) damaged++;
    magpie_free(blocks[i]);
  }
  CHECK(damaged == 0);
  NOTE("  magpie_trim released %zu bytes\n", released);
  /* About 50 MiB was freed; trim cannot release more than the process ever mapped. */
  CHECK(released < (size_t)1 << 40);
  /* After the trim everything still works, including recycled memory being zero in calloc. */
  for (int i = 0; i < COUNT; i++) {
    size_t n = i % 10 == 0 ? 256 * KiB : 1000;
    blocks[i] = magpie_calloc(1, opaque_size(n));
    REQUIRE(blocks[i] != NULL);
    CHECK(all_bytes_are(blocks[i], n, 0));
  }
  for (int i = 0; i < COUNT; i++)
    magpie_free(blocks[i]);
}

static char *read_all(FILE *fp, size_t *len) {
  long size = ftell(fp);
  REQUIRE(size >= 0);
  char *text = malloc((size_t)size + 1);
  REQUIRE(text != NULL);
  rewind(fp);
  *len = fread(text, 1, (size_t)size, fp);
  text[*len] = '\0';
  return text;
}

/* The number after "field": in json, or -1 if there is none. */
static long long json_number(const char *json, const char *field) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", field);
  const char *at = strstr(json, key);
  return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

/* What magpie_stats_write writes in format, read back (the caller frees it). */
static char *stats_read(int format, size_t *len) {
  FILE *fp = tmpfile();
  REQUIRE(fp != NULL);
  int rc = magpie_stats_write(fileno(fp), format);
  CHECK(rc >= 0);
  REQUIRE(fseek(fp, 0, SEEK_END) == 0);
  char *text = read_all(fp, len);
  fclose(fp);
  return text;
}

/* magpie_stats_write's JSON, read back (the caller frees it). */
static char *stats_json(void) {
  size_t len;
  char *json = stats_read(MAGPIE_STATS_JSON, &len);
  const char *start = json;
  while (*start == ' ' || *start == '\n')
    start++;
  if (*start != '{') NOTE("  JSON stats: %.200s\n", json);
  CHECK(*start == '{');
  CHECK(strstr(json, "\"magpie\"") != NULL);
  CHECK(strstr(json, "\"allocs\"") != NULL);
  CHECK(strchr(json, '}') != NULL);
  return json;
}

typedef struct {
  long long live, peak, requested;
} totals_t;

static totals_t stats_totals(void) {
  char *json = stats_json();
  totals_t t = {json_number(json, "live_bytes"), json_number(json, "peak_live_bytes"),
                json_number(json, "bytes_requested")};
  free(json);
  return t;
}

/* The JSON and text statistics, and the totals every mode counts (debug mode and sampling serve
   blocks outside the threads' counters): two blocks are live and requested while held, and
   the peak of live bytes remembers them once one is freed. */
static void test_stats_write(void) {
  size_t small = opaque_size(12345), big = opaque_size(100000);
  totals_t before = stats_totals();
  void *keep = magpie_malloc(small), *drop = magpie_malloc(big);
  REQUIRE(keep != NULL && drop != NULL);
  totals_t held = stats_totals();
  magpie_free(drop);
  totals_t after = stats_totals();
  if (held.live < before.live + (long long)(small + big) ||
      held.requested < before.requested + (long long)(small + big) || after.peak < held.live)
    NOTE("  live, peak, requested: %lld %lld %lld before, %lld %lld %lld held, %lld %lld %lld "
         "after\n",
         before.live, before.peak, before.requested, held.live, held.peak, held.requested,
         after.live, after.peak, after.requested);
  CHECK(held.live >= before.live + (long long)(small + big));
  CHECK(held.requested >= before.requested + (long long)(small + big));
  CHECK(after.peak >= held.live);

  size_t len = 0;
  char *text = stats_read(MAGPIE_STATS_TEXT, &len);
  CHECK(len > 0);
  free(text);
  magpie_free(keep);
}

int main(void) {
  api_begin("magpie_names");
  test_malloc_free();
  test_calloc();
  test_realloc();
  test_aligned();
  test_crossing();
  test_trim();
  test_stats_write();
  return api_end();
}
