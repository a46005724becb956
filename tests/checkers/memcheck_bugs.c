/*
 * memcheck_bugs: heap bugs for valgrind's memcheck to find with magpie doing the allocating
 * (memcheck_check.py runs it and reads memcheck's report). One bug a function, each named for
 * what it does, so a report can be matched to its bug by the function at the top of its stack:
 * an overrun, a use after free and a leak of a malloc block and of an object cache's object,
 * and an uninitialised malloc byte used in a branch. Before them, correct use of every entry
 * point (realloc in place and moved, calloc, aligned blocks, an object cache with a
 * constructor and destructor, another thread), which must draw no report at all: memcheck's
 * error count is checked to be exactly the bugs'.
 */
#define _GNU_SOURCE
#include <magpie.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static volatile char sink;
static void *volatile leaked[2];

static int object_ctor(void *obj, void *arg, int flags) {
  (void)arg, (void)flags;
  memset(obj, 0x5a, 56);
  return 0;
}

static void object_dtor(void *obj, void *arg) {
  (void)arg;
  sink = ((char *)obj)[10]; /* a destructor reads the object it tears down */
}

static void *thread_work(void *arg) {
  char *p = malloc(200);
  memset(p, 1, 200);
  free(arg); /* a block of the main thread, freed here */
  free(p);
  return NULL;
}

/* Correct use: no report. */
static NOINLINE int correct_use(magpie_cache_t *objects) {
  char *p = malloc(20);
  memset(p, 'a', 20);
  p = realloc(p, 24); /* in place */
  p[23] = 'b';
  p = realloc(p, 5000); /* moved */
  int bad = p[0] != 'a' || p[23] != 'b';
  p[4999] = 'c';
  free(p);
  int *z = calloc(100, sizeof(int));
  for (int i = 0; i < 100; i++)
    bad |= z[i] != 0;
  free(z);
  void *a = NULL;
  if (posix_memalign(&a, 256, 300) != 0) return 1;
  memset(a, 0, 300);
  bad |= malloc_usable_size(a) != 300; /* memcheck's answer: the size asked for */
  free(a);
  char *big = malloc(600000); /* a large block, under memcheck's 1 MB "big block" */
  big[599999] = 1;
  free(big);
  char *o = magpie_cache_alloc(objects, 0);
  bad |= o[55] != 0x5a; /* constructed */
  magpie_cache_free(objects, o);
  pthread_t t;
  if (pthread_create(&t, NULL, thread_work, malloc(64)) != 0 || pthread_join(t, NULL) != 0)
    return 1;
  return bad;
}

static NOINLINE void overrun_malloc(void) {
  char *p = malloc(24);
  p[24] = 1;
  free(p);
}

static NOINLINE void use_after_free_malloc(void) {
  char *p = malloc(40);
  free(p);
  sink = p[3];
}

static NOINLINE void leak_malloc(void) {
  leaked[0] = malloc(100);
  leaked[0] = NULL;
}

static NOINLINE void uninitialised_malloc(void) {
  char *p = malloc(32);
  if (p[17] == 'x') sink = 1;
  free(p);
}

static NOINLINE void overrun_object(magpie_cache_t *objects) {
  char *o = magpie_cache_alloc(objects, 0);
  o[56] = 1;
  magpie_cache_free(objects, o);
}

static NOINLINE void use_after_free_object(magpie_cache_t *objects) {
  char *o = magpie_cache_alloc(objects, 0);
  magpie_cache_free(objects, o);
  sink = o[8];
}

static NOINLINE void leak_object(magpie_cache_t *others) {
  leaked[1] = magpie_cache_alloc(others, 0);
  leaked[1] = NULL;
}

int main(void) {
  magpie_cache_t *objects =
      magpie_cache_create("objects", 56, 8, object_ctor, object_dtor, NULL, 0);
  magpie_cache_t *others = magpie_cache_create("others", 88, 8, NULL, NULL, NULL, 0);
  if (!objects || !others || correct_use(objects) != 0) {
    fprintf(stderr, "memcheck_bugs: correct use went wrong\n");
    return 1;
  }
  overrun_malloc();
  use_after_free_malloc();
  leak_malloc();
  uninitialised_malloc();
  overrun_object(objects);
  use_after_free_object(objects);
  leak_object(others);
  magpie_cache_destroy(objects);
  return 0;
}
