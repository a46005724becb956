/*
 * A program built against an installed magpie (tests/install/install.sh builds it with
 * pkg-config, linked with libmagpie.so and with libmagpie.a). It passes only if magpie serves
 * its allocations: the malloc every object of the process resolves is defined in the same object
 * as magpie_malloc (libmagpie.so, or the executable itself when linked statically), magpie
 * knows the blocks malloc returns, and an object cache (a magpie-only API) works.
 */
#include "check.h"

#include <magpie.h>

static int constructed;

static int count_ctor(void *obj, void *arg, int flags) {
  (void)arg, (void)flags;
  memset(obj, 0x5a, 64);
  constructed++;
  return 0;
}

int main(int argc, char **argv) {
  api_test_name = argc > 1 ? argv[1] : "install_probe";
  const char *own = api_object_of((void *)magpie_malloc);
  const char *where = api_object_of(dlsym(RTLD_DEFAULT, "malloc"));
  if (strcmp(where, own) != 0)
    NOTE("  malloc resolves to %s, magpie_malloc is in %s\n", where, own);
  REQUIRE(strcmp(where, own) == 0);
  char *text = malloc(opaque_size(1000));
  REQUIRE(text != NULL);
  CHECK(magpie_usable_size(text) >= 1000);
  free(text);
  magpie_cache_t *cache = magpie_cache_create("install_probe", 64, 16, count_ctor, NULL, NULL, 0);
  REQUIRE(cache != NULL);
  unsigned char *obj = magpie_cache_alloc(cache, MAGPIE_DEFAULT);
  REQUIRE(obj != NULL);
  CHECK(obj[63] == 0x5a && constructed > 0);
  magpie_cache_free(cache, obj);
  magpie_cache_destroy(cache);
  fprintf(stderr, "%s: malloc and magpie_malloc in %s\n", api_test_name, own);
  return api_end();
}
