/*
 * Object caches (magpie_cache_*), as include/magpie.h describes them:
 * - the constructor runs when an object enters the cache, before it is first handed out, so
 *   every object handed out is constructed;
 * - an object keeps its constructed state across magpie_cache_free and the next
 *   magpie_cache_alloc (the cache keeps its own links outside the object), and a free/alloc
 *   cycle does not construct again;
 * - objects honour the cache's alignment and never overlap;
 * - after magpie_cache_destroy, every constructed object was destructed exactly once, with the
 *   cache's argument, and in its constructed state;
 * - a constructor that fails makes magpie_cache_alloc return NULL with errno ENOMEM.
 *
 * The constructor fills the whole object with a pattern derived from the object's address; a
 * client that changes nothing must find exactly that pattern on every allocation.
 */
#include "check.h"

#include <errno.h>
#include <magpie.h>

typedef struct {
  size_t size;            /* object size of the cache under test */
  unsigned long ctors;    /* successful constructor calls */
  unsigned long dtors;    /* destructor calls */
  unsigned long bad_dtor; /* destructed objects not in constructed state */
  unsigned long bad_arg;  /* calls that received another argument */
  int fail_ctor;          /* when set, the constructor fails */
  unsigned long failed;   /* constructor calls that failed */
} counters_t;

static int construct(void *obj, void *arg, int flags) {
  counters_t *c = arg;
  (void)flags;
  if (c->fail_ctor) {
    c->failed++;
    return -1;
  }
  pattern_fill(obj, c->size, (uintptr_t)obj);
  c->ctors++;
  return 0;
}

static void destruct(void *obj, void *arg) {
  counters_t *c = arg;
  if (!pattern_ok(obj, c->size, (uintptr_t)obj)) c->bad_dtor++;
  c->dtors++;
}

/* Constructor and destructor that check the argument they are given. */
static counters_t *expected_arg;

static int construct_checked(void *obj, void *arg, int flags) {
  if (arg != expected_arg) expected_arg->bad_arg++;
  return construct(obj, expected_arg, flags);
}

static void destruct_checked(void *obj, void *arg) {
  if (arg != expected_arg) expected_arg->bad_arg++;
  destruct(obj, expected_arg);
}

/* One cache of objects of `size` bytes aligned to `align` (0: default). */
static void check_cache(size_t size, size_t align, int objects) {
  counters_t c = {.size = size};
  expected_arg = &c;
  char name[64];
  snprintf(name, sizeof name, "test_%zu_%zu", size, align);
  magpie_cache_t *cache =
      magpie_cache_create(name, size, align, construct_checked, destruct_checked, &c, 0);
  REQUIRE(cache != NULL);
  CHECK(c.dtors == 0);

  void **live = malloc((size_t)objects * sizeof *live);
  REQUIRE(live != NULL);
  size_t want_align = align != 0 ? align : 1;
  unsigned long unconstructed = 0, misaligned = 0;
  for (int i = 0; i < objects; i++) {
    live[i] = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
    REQUIRE(live[i] != NULL);
    if (!is_aligned(live[i], want_align)) misaligned++;
    if (!pattern_ok(live[i], size, (uintptr_t)live[i])) unconstructed++;
  }
  if (misaligned || unconstructed)
    NOTE("  cache %s: %lu misaligned, %lu not constructed of %d\n", name, misaligned, unconstructed,
         objects);
  CHECK(misaligned == 0);
  CHECK(unconstructed == 0);
  /* Every live object was constructed, and none was destructed while live. */
  CHECK(c.ctors >= (unsigned long)objects);
  CHECK(c.ctors - c.dtors >= (unsigned long)objects);

  /* Live objects do not overlap: overwrite each whole object with its own tag, check all. */
  for (int i = 0; i < objects; i++)
    pattern_fill(live[i], size, (uintptr_t)i + 1000000u);
  unsigned long overlapped = 0;
  for (int i = 0; i < objects; i++)
    if (!pattern_ok(live[i], size, (uintptr_t)i + 1000000u)) overlapped++;
  CHECK(overlapped == 0);
  /* The client restores the constructed state before freeing, as a cache client must. */
  for (int i = 0; i < objects; i++)
    pattern_fill(live[i], size, (uintptr_t)live[i]);
  for (int i = 0; i < objects; i++)
    magpie_cache_free(cache, live[i]);

  /* Freed and allocated again: objects come back in their constructed state, untouched by the
   * cache's own bookkeeping. */
  unconstructed = 0;
  for (int i = 0; i < objects; i++) {
    live[i] = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
    REQUIRE(live[i] != NULL);
    if (!pattern_ok(live[i], size, (uintptr_t)live[i])) unconstructed++;
  }
  if (unconstructed) NOTE("  cache %s: %lu objects came back changed\n", name, unconstructed);
  CHECK(unconstructed == 0);
  for (int i = 0; i < objects; i++)
    magpie_cache_free(cache, live[i]);

  /* A free/alloc cycle of one object does not construct it again. */
  unsigned long ctors_before = c.ctors;
  for (int i = 0; i < 10000; i++) {
    void *obj = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
    REQUIRE(obj != NULL);
    if (!pattern_ok(obj, size, (uintptr_t)obj)) unconstructed++;
    magpie_cache_free(cache, obj);
  }
  if (c.ctors - ctors_before > 1000)
    NOTE("  cache %s: %lu constructions in 10000 free/alloc cycles\n", name,
         c.ctors - ctors_before);
  CHECK(c.ctors - ctors_before <= 1000);
  CHECK(unconstructed == 0);

  magpie_cache_destroy(cache);
  if (c.dtors != c.ctors)
    NOTE("  cache %s: %lu constructed, %lu destructed\n", name, c.ctors, c.dtors);
  CHECK(c.dtors == c.ctors);
  CHECK(c.bad_dtor == 0);
  CHECK(c.bad_arg == 0);
  free(live);
}

/* A constructor that starts failing: allocation returns NULL with ENOMEM once the cache needs a
 * new object, works again when the constructor recovers, and destroy destructs only objects
 * that were constructed. */
static void test_failing_ctor(void) {
  enum { MAX_TRIES = 1 << 20 };
  counters_t c = {.size = 40};
  magpie_cache_t *cache = magpie_cache_create("failing", 40, 8, construct, destruct, &c, 0);
  REQUIRE(cache != NULL);
  /* Always failing from the start. */
  c.fail_ctor = 1;
  errno = 0;
  void *obj = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
  CHECK(obj == NULL);
  CHECK(errno == ENOMEM);
  CHECK(c.failed >= 1);
  /* Recovers. */
  c.fail_ctor = 0;
  void **live = malloc(MAX_TRIES * sizeof *live);
  REQUIRE(live != NULL);
  int count = 0;
  for (; count < 10; count++) {
    live[count] = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
    REQUIRE(live[count] != NULL);
    CHECK(pattern_ok(live[count], 40, (uintptr_t)live[count]));
  }
  /* Fails again: objects already constructed may still be handed out, but once the cache
   * needs a new one, allocation fails. */
  c.fail_ctor = 1;
  unsigned long failed_before = c.failed;
  for (;;) {
    REQUIRE(count < MAX_TRIES);
    errno = 0;
    void *o = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
    if (o == NULL) {
      CHECK(errno == ENOMEM);
      break;
    }
    CHECK(pattern_ok(o, 40, (uintptr_t)o));
    live[count++] = o;
  }
  CHECK(c.failed > failed_before);
  c.fail_ctor = 0;
  void *again = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
  CHECK(again != NULL);
  if (again != NULL) live[count++] = again;
  for (int i = 0; i < count; i++)
    magpie_cache_free(cache, live[i]);
  magpie_cache_destroy(cache);
  CHECK(c.dtors == c.ctors);
  CHECK(c.bad_dtor == 0);
  free(live);
}

/* A cache without constructor or destructor; and many caches created and destroyed. */
static void test_plain_caches(void) {
  for (int round = 0; round < 200; round++) {
    size_t size = 1 + (size_t)round * 37 % 3000;
    magpie_cache_t *cache = magpie_cache_create("plain", size, 0, NULL, NULL, NULL, 0);
    REQUIRE(cache != NULL);
    void *objs[50];
    for (int i = 0; i < 50; i++) {
      objs[i] = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
      REQUIRE(objs[i] != NULL);
      pattern_fill(objs[i], size, (uintptr_t)i);
    }
    for (int i = 0; i < 50; i++) {
      CHECK(pattern_ok(objs[i], size, (uintptr_t)i));
      magpie_cache_free(cache, objs[i]);
    }
    magpie_cache_destroy(cache);
  }
}

int main(void) {
  api_begin("cache");
  check_cache(1, 0, 1000);
  check_cache(24, 0, 5000);
  check_cache(200, 64, 3000);
  check_cache(100, 4096, 300);
  check_cache(5000, 4096, 200);
  check_cache(64, 64, 20000);
  check_cache(3000, 8, 500);
  check_cache(70000, 16, 40);
  test_failing_ctor();
  test_plain_caches();
  return api_end();
}
