/*
 * san_objects: magpie's object caches in a program built with a sanitizer (docs/sanitizers.md),
 * run by sanitizers.sh. The sanitizer's malloc serves malloc; magpie's caches stay magpie's and
 * tell the sanitizer of their objects.
 *   clean      objects with a constructor and a destructor, handed from thread to thread
 *              (under TSan: no race may be reported; under ASan: nothing)
 *   overrun    writes one byte past a 56-byte object (ASan: reported)
 *   after-free reads an object after magpie_cache_free (ASan: reported)
 *   who        prints whose malloc the program calls
 */
#include "check.h"
#include <magpie.h>
#include <pthread.h>

#define NOINLINE __attribute__((noinline))
#define OBJECT_SIZE 56

static magpie_cache_t *cache;
static __thread volatile char sink; /* per thread: destructors run on any */

static int object_ctor(void *obj, void *arg, int flags) {
  (void)arg, (void)flags;
  memset(obj, 0x5a, OBJECT_SIZE);
  return 0;
}

static void object_dtor(void *obj, void *arg) {
  (void)arg;
  sink = ((char *)obj)[OBJECT_SIZE - 1];
}

static void *handoff(void *arg) {
  (void)arg;
  for (int i = 0; i < 2000; i++) {
    char *o = magpie_cache_alloc(cache, MAGPIE_NOFAIL);
    if (o[OBJECT_SIZE - 1] != 0x5a) abort(); /* constructed */
    memset(o, i, OBJECT_SIZE);
    o[OBJECT_SIZE - 1] = 0x5a; /* as the constructor left it */
    magpie_cache_free(cache, o);
  }
  return NULL;
}

static NOINLINE void overrun_object(void) {
  char *o = magpie_cache_alloc(cache, MAGPIE_NOFAIL);
  o[OBJECT_SIZE] = 1;
  magpie_cache_free(cache, o);
}

static NOINLINE void use_after_free_object(void) {
  char *o = magpie_cache_alloc(cache, MAGPIE_NOFAIL);
  magpie_cache_free(cache, o);
  sink = o[8];
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "clean";
  if (strcmp(what, "who") == 0) {
    printf("malloc: %s\n", api_magpie_loaded() ? "magpie" : "not magpie");
    return 0;
  }
  cache = magpie_cache_create("objects", OBJECT_SIZE, 8, object_ctor, object_dtor, NULL, 0);
  if (!cache) return 1;
  if (strcmp(what, "overrun") == 0) {
    overrun_object();
  } else if (strcmp(what, "after-free") == 0) {
    use_after_free_object();
  } else {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
      if (pthread_create(&t[i], NULL, handoff, NULL) != 0) return 1;
    for (int i = 0; i < 4; i++)
      pthread_join(t[i], NULL);
  }
  magpie_cache_destroy(cache);
  printf("%s: done\n", what);
  return 0;
}
