/*
 * A C program linked with build/libmagpie.a (the README's `-lmagpie` with -lpthread): the
 * archive's malloc family lives in the executable itself, which must export it so that every
 * shared library's calls (libc's strdup, asprintf, stdio buffers) reach magpie too. Checked:
 * the malloc, free and realloc that the dynamic loader resolves for everyone are defined in the
 * same object as magpie_malloc; blocks that libc allocates internally are counted in magpie's
 * figures and freed by the program's free; threads (magpie's reaper among them) work.
 */
#include "check.h"

#include <magpie.h>
#include <malloc.h>
#include <pthread.h>

#define BIG (1 * MiB)

static const char *const replaced[] = {"malloc",
                                       "free",
                                       "calloc",
                                       "realloc",
                                       "posix_memalign",
                                       "aligned_alloc",
                                       "malloc_usable_size",
                                       "mallinfo2"};

static void *thread_churn(void *arg) {
  (void)arg;
  for (int i = 0; i < 10000; i++) {
    void *p = malloc(opaque_size(16 + (size_t)i % 2000));
    if (p == NULL) return p;
    memset(p, 7, 16);
    free(p);
  }
  return (void *)1;
}

int main(void) {
  api_test_name = "static_c";
  const char *own = api_object_of((void *)magpie_malloc); /* the executable */
  for (size_t i = 0; i < sizeof replaced / sizeof replaced[0]; i++) {
    const char *where = api_object_of(dlsym(RTLD_DEFAULT, replaced[i]));
    if (strcmp(where, own) != 0) NOTE("  %s resolves to %s, not %s\n", replaced[i], where, own);
    REQUIRE(strcmp(where, own) == 0);
  }
  /* libc allocates with the exported malloc: a big strdup is live bytes in magpie's figures. */
  char *text = malloc(opaque_size(BIG + 1));
  REQUIRE(text != NULL);
  memset(text, 'm', BIG);
  text[BIG] = '\0';
  size_t before = mallinfo2().uordblks;
  char *copy = strdup(text);
  REQUIRE(copy != NULL);
  size_t during = mallinfo2().uordblks;
  CHECK(during >= before + BIG);
  CHECK(magpie_usable_size(copy) >= BIG + 1);
  CHECK(strlen(copy) == BIG);
  free(copy);
  CHECK(mallinfo2().uordblks + BIG <= during);
  free(text);
  pthread_t t[2];
  void *ok[2];
  for (int i = 0; i < 2; i++)
    REQUIRE(pthread_create(&t[i], NULL, thread_churn, NULL) == 0);
  for (int i = 0; i < 2; i++) {
    REQUIRE(pthread_join(t[i], &ok[i]) == 0);
    CHECK(ok[i] != NULL);
  }
  CHECK(magpie_verify() == 0);
  return api_end();
}
