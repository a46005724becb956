/*
 * alloc_probe: a program with known allocation behaviour, for the tests of the magpie command.
 *
 *   alloc_probe [COUNT [SIZE]]   COUNT mallocs of SIZE bytes (default 1000 x 100), all live at
 *                                once, then COUNT frees; exits 0
 *   alloc_probe --quick-exit     allocates, then leaves by _exit(0): no exit handlers run
 *   alloc_probe --fork N         runs N children that each allocate and exit(0), waits for them
 *   alloc_probe --hold COUNT SIZE MS   COUNT mallocs of SIZE bytes, every second one freed; then
 *                                prints "ready" and keeps allocating and freeing other sizes for
 *                                MS ms (the live statistics tests read it meanwhile)
 *   alloc_probe --contend THREADS OPS  THREADS threads each take and give back OPS objects of
 *                                one object cache (magpie's API, found with dlsym) in batches
 *   alloc_probe --contend-for THREADS MS  the same for MS ms, each object with a malloc'd
 *                                block beside it (so size classes move too); prints "ready"
 *                                once the threads run (`magpie top` tests watch it)
 *   alloc_probe --malloc-info    prints malloc_info(0, stdout)
 *
 * It is built with -fno-builtin so the compiler keeps every malloc and free.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Pointers live in a global array so that no call can be proven dead. */
static void **slots;

static int churn(size_t count, size_t size) {
  slots = malloc(count * sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < count; i++) {
    slots[i] = malloc(size);
    if (!slots[i]) return -1;
    memset(slots[i], (int)(i & 0xff), size);
  }
  for (size_t i = 0; i < count; i++)
    free(slots[i]);
  free(slots);
  return 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int hold(size_t count, size_t size, double ms) {
  slots = malloc(count * sizeof *slots);
  if (!slots) return 1;
  for (size_t i = 0; i < count; i++)
    if (!(slots[i] = malloc(size))) return 1;
  for (size_t i = 0; i < count; i += 2)
    free(slots[i]);
  puts("ready");
  fflush(stdout);
  for (double end = now_ms() + ms; now_ms() < end;) { /* slow paths: the reap runs, publishes */
    if (churn(200, 40) < 0) return 1;
    usleep(2000);
  }
  return 0;
}

/* magpie's object-cache API, looked up at run time: the probe is not linked with magpie. */
typedef void *cache_create_t(const char *, size_t, size_t, void *, void *, void *, int);
typedef void *cache_alloc_t(void *, int);
typedef void cache_free_t(void *, void *);
static void *contend_cache;
static cache_alloc_t *contend_alloc;
static cache_free_t *contend_free;
static long contend_ops;
static double contend_until; /* now_ms() deadline of --contend-for; 0 for --contend */

#define CONTEND_BLOCK 96 /* bytes of the malloc'd block beside each object (--contend-for) */

#define CONTEND_BATCH 2048 /* past what a depot keeps: batches reach the slab layer too */

static void *contend_thread(void *arg) {
  static __thread void *batch[CONTEND_BATCH], *blocks[CONTEND_BATCH];
  (void)arg;
  for (long done = 0; done < contend_ops && (!contend_until || now_ms() < contend_until);
       done += CONTEND_BATCH) {
    for (int i = 0; i < CONTEND_BATCH; i++) {
      if (!(batch[i] = contend_alloc(contend_cache, 0))) return (void *)1;
      if (contend_until && !(blocks[i] = malloc(CONTEND_BLOCK))) return (void *)1;
    }
    for (int i = 0; i < CONTEND_BATCH; i++) {
      contend_free(contend_cache, batch[i]);
      if (contend_until) free(blocks[i]);
    }
  }
  return NULL;
}

static int contend(int threads, long ops) {
  cache_create_t *create = (cache_create_t *)dlsym(RTLD_DEFAULT, "magpie_cache_create");
  contend_alloc = (cache_alloc_t *)dlsym(RTLD_DEFAULT, "magpie_cache_alloc");
  contend_free = (cache_free_t *)dlsym(RTLD_DEFAULT, "magpie_cache_free");
  if (!create || !contend_alloc || !contend_free) {
    fputs("alloc_probe: magpie is not loaded\n", stderr);
    return 1;
  }
  /* 56-byte objects in 64-byte strides: 8 bytes lost to rounding each */
  if (!(contend_cache = create("contended", 56, 0, NULL, NULL, NULL, 0))) return 1;
  contend_ops = ops;
  pthread_t t[64];
  if (threads > 64) threads = 64;
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, contend_thread, NULL) != 0) return 1;
  if (contend_until) {
    puts("ready");
    fflush(stdout);
  }
  int failed = 0;
  for (int i = 0; i < threads; i++) {
    void *rc;
    pthread_join(t[i], &rc);
    failed |= rc != NULL;
  }
  return failed;
}

int main(int argc, char **argv) {
  if (argc >= 5 && strcmp(argv[1], "--hold") == 0)
    return hold(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10), atof(argv[4]));
  if (argc >= 4 && strcmp(argv[1], "--contend") == 0) return contend(atoi(argv[2]), atol(argv[3]));
  if (argc >= 4 && strcmp(argv[1], "--contend-for") == 0) {
    contend_until = now_ms() + atof(argv[3]);
    return contend(atoi(argv[2]), LONG_MAX);
  }
  if (argc >= 2 && strcmp(argv[1], "--malloc-info") == 0) return malloc_info(0, stdout) != 0;
  if (argc >= 2 && strcmp(argv[1], "--quick-exit") == 0) {
    if (churn(100, 64) < 0) return 1;
    _exit(0);
  }
  if (argc >= 3 && strcmp(argv[1], "--fork") == 0) {
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
      pid_t pid = fork();
      if (pid < 0) return 1;
      if (pid == 0) exit(churn(10, 32) < 0);
    }
    int status, failed = 0;
    while (wait(&status) > 0)
      failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
  }
  size_t count = argc >= 2 ? strtoul(argv[1], NULL, 10) : 1000;
  size_t size = argc >= 3 ? strtoul(argv[2], NULL, 10) : 100;
  if (churn(count, size) < 0) {
    fputs("alloc_probe: out of memory\n", stderr);
    return 1;
  }
  return 0;
}
