/*
 * More live object caches than magpie gives a per-thread magazine slot (256): 300 caches of
 * different sizes and alignments, objects taken from every one by four threads at once and
 * freed by the main thread (frees from a thread other than the allocating one), then half the
 * caches destroyed and 150 new ones created in their places, and all of it again. Per cache, as
 * include/magpie.h promises: every object handed out is constructed and in its constructed
 * state, no two live objects overlap, and once the cache is destroyed the destructor has run
 * exactly once per constructor call, on constructed objects, with the cache's own argument.
 */
#include "check.h"

#include <magpie.h>
#include <pthread.h>

#define CACHES 300
#define USERS 4      /* threads taking objects from every cache */
#define PER_CACHE 12 /* objects each user takes from each cache per pass */
#define MAX_SIZE 1024

typedef struct {
  magpie_cache_t *cache;
  size_t size, align;
  unsigned long ctors, dtors, bad_state; /* updated atomically */
} counted_cache_t;

static counted_cache_t caches[CACHES];
static void *taken[USERS][CACHES][PER_CACHE];
static unsigned long not_constructed, misaligned, wrong_arg; /* updated atomically */

static int construct(void *obj, void *arg, int flags) {
  counted_cache_t *c = arg;
  (void)flags;
  pattern_fill(obj, c->size, (uintptr_t)obj);
  __atomic_add_fetch(&c->ctors, 1, __ATOMIC_RELAXED);
  return 0;
}

static void destruct(void *obj, void *arg) {
  counted_cache_t *c = arg;
  if (c < caches || c >= caches + CACHES || c->cache == NULL) {
    __atomic_add_fetch(&wrong_arg, 1, __ATOMIC_RELAXED);
    return;
  }
  if (!pattern_ok(obj, c->size, (uintptr_t)obj))
    __atomic_add_fetch(&c->bad_state, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&c->dtors, 1, __ATOMIC_RELAXED);
}

/* Cache i of generation gen: sizes and alignments differ between neighbours and generations. */
static void create(int i, int gen) {
  counted_cache_t *c = &caches[i];
  memset(c, 0, sizeof *c);
  c->size = 8 + (size_t)((i * 37 + gen * 11) % (MAX_SIZE - 8));
  c->align = (i + gen) % 5 == 0 ? (size_t)64 << ((i + gen) % 3) : 0;
  char name[32];
  snprintf(name, sizeof name, "corner_%d_%d", i, gen);
  c->cache = magpie_cache_create(name, c->size, c->align, construct, destruct, c, 0);
  REQUIRE(c->cache != NULL);
}

/* Checks the counts of cache i and destroys it. */
static void destroy(int i) {
  counted_cache_t *c = &caches[i];
  magpie_cache_destroy(c->cache);
  if (c->dtors != c->ctors || c->bad_state != 0)
    NOTE("  cache %d (size %zu, align %zu): %lu ctors, %lu dtors, %lu in a wrong state\n", i,
         c->size, c->align, c->ctors, c->dtors, c->bad_state);
  CHECK(c->ctors >= (unsigned long)USERS * PER_CACHE);
  CHECK(c->dtors == c->ctors);
  CHECK(c->bad_state == 0);
  c->cache = NULL;
}

static void *user(void *arg) {
  int u = (int)(uintptr_t)arg;
  for (int i = 0; i < CACHES; i++) {
    counted_cache_t *c = &caches[(i + u * 75) % CACHES]; /* users start in different places */
    for (int k = 0; k < PER_CACHE; k++) {
      void *obj = magpie_cache_alloc(c->cache, MAGPIE_DEFAULT);
      taken[u][c - caches][k] = obj;
      if (obj == NULL || !pattern_ok(obj, c->size, (uintptr_t)obj))
        __atomic_add_fetch(&not_constructed, 1, __ATOMIC_RELAXED);
      else if (!is_aligned(obj, c->align ? c->align : 8))
        __atomic_add_fetch(&misaligned, 1, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* Every cache used by USERS threads at once; then each cache's objects are checked for overlap
   (objects of one cache never overlap; caches do not share slabs) and freed by this thread. */
static void use_all(void) {
  pthread_t tid[USERS];
  for (int u = 0; u < USERS; u++)
    REQUIRE(pthread_create(&tid[u], NULL, user, (void *)(uintptr_t)u) == 0);
  for (int u = 0; u < USERS; u++)
    REQUIRE(pthread_join(tid[u], NULL) == 0);
  static uintptr_t live[USERS * PER_CACHE];
  unsigned long overlaps = 0;
  for (int i = 0; i < CACHES; i++) {
    int n = 0;
    for (int u = 0; u < USERS; u++)
      for (int k = 0; k < PER_CACHE; k++)
        if (taken[u][i][k] != NULL) live[n++] = (uintptr_t)taken[u][i][k];
    qsort(live, (size_t)n, sizeof *live, by_address);
    for (int k = 1; k < n; k++)
      overlaps += live[k] - live[k - 1] < caches[i].size;
    for (int u = 0; u < USERS; u++)
      for (int k = 0; k < PER_CACHE; k++)
        if (taken[u][i][k] != NULL) magpie_cache_free(caches[i].cache, taken[u][i][k]);
  }
  CHECK(not_constructed == 0);
  CHECK(misaligned == 0);
  CHECK(overlaps == 0);
}

int main(void) {
  api_begin("caches");
  for (int i = 0; i < CACHES; i++)
    create(i, 0);
  use_all();
  for (int i = 0; i < CACHES; i += 2) /* the freed slots go to caches made after the 256th */
    destroy(i);
  for (int i = 0; i < CACHES; i += 2)
    create(i, 1);
  use_all();
  for (int i = 0; i < CACHES; i++)
    destroy(i);
  CHECK(wrong_arg == 0);
  CHECK(magpie_verify() == 0);
  return api_end();
}
