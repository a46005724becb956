/*
 * stress_stack: a thread's stack pages are mapped at their first write, so the first call that
 * reaches a new depth faults there. A quiet lock's holder must take no fault (src/platform/
 * inject.h), its callees' frames included: a page of stack that a locked section would reach
 * first is written before the lock is taken (docs/decisions/quiet-locks.md).
 *
 * Threads run one at a time, each on a stack of its own, freshly mapped, and each enters
 * magpie deeper than the last (modulo a page), so that the boundary between the last page
 * touched and the first never touched falls at every position of magpie's paths. A thread's
 * first call is, in turn, a free of a large block the main thread made (the heap arena's
 * free), a resize of one (its resize), or a malloc (the registry, the CPUs' magazines, a slab
 * made); then blocks of several classes (slabs made and filled, the depots), a large block
 * made, resized and freed, and the thread's exit. Blocks of one class are kept to the end, so
 * that every thread makes slabs. In the test build libmagpie_inject.so with
 * MAGPIE_OPTIONS=inject=SEED the exit line says how many page faults quiet locks' holders took.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define TEST "stress_stack"
#define KEPT 4 /* blocks of `kept_size` each thread leaves to the main thread */

static long nthreads, step, kept_size, large_size;
static stress_param_t params[] = {
    {"threads", 768, "threads, one after another", &nthreads},
    {"step", 16, "how much deeper each thread enters magpie than the last of its kind", &step},
    {"kept_size", 20000, "size of the blocks each thread leaves to the end", &kept_size},
    {"large_size", 300000, "size of the large block each thread makes and resizes", &large_size},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

#define STACK_BYTES (256 << 10)
static const size_t sizes[] = {16, 48, 160, 600, 3000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

typedef struct {
  pthread_t thread;
  uint32_t index;
  stress_block_t given[2]; /* large blocks the main thread made: one to free, one to resize */
  stress_block_t kept[KEPT];
} worker_t;

static uint64_t seed;

/* The calls into magpie after the thread's first. */
static void work(worker_t *w) {
  stress_block_t blocks[NSIZES], large;
  for (size_t i = 0; i < NSIZES; i++)
    stress_block_new(&blocks[i], magpie_malloc(sizes[i]), sizes[i], seed + i, "malloc", w->index, 0,
                     TEST);
  for (int i = 0; i < KEPT; i++)
    stress_block_new(&w->kept[i], magpie_calloc(1, (size_t)kept_size), (size_t)kept_size,
                     seed + NSIZES + (uint64_t)i, "calloc", w->index, 0, TEST);
  stress_block_new(&large, magpie_malloc((size_t)large_size), (size_t)large_size, seed, "malloc",
                   w->index, 0, TEST);
  stress_block_realloc(&large, 2 * (size_t)large_size, seed + 1, w->index, TEST);
  stress_block_free(&large, TEST);
  for (size_t i = 0; i < NSIZES; i++)
    stress_block_free(&blocks[i], TEST);
}

/* From a frame below its entry's by the pad: the thread's first call (free, resize or malloc,
   by its index), then the rest. */
__attribute__((noinline)) static void enter(worker_t *w) {
  switch (w->index % 3) {
  case 0:
    stress_block_free(&w->given[0], TEST);
    break;
  case 1:
    stress_block_realloc(&w->given[1], 2 * (size_t)large_size, seed, w->index, TEST);
    break;
  }
  work(w);
  if (w->given[0].p) stress_block_free(&w->given[0], TEST);
  stress_block_free(&w->given[1], TEST);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  size_t depth = (size_t)step * (w->index / 3) % 4096 + 16;
  volatile char *pad = __builtin_alloca(depth);
  pad[0] = 0;
  enter(w);
  __asm__ volatile("" : : "r"(pad) : "memory"); /* the pad stays until enter returns */
  return NULL;
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (step <= 0 || kept_size <= 0 || large_size <= 0)
    stress_fail(TEST ": step, kept_size and large_size must be positive");
  worker_t *workers = calloc((size_t)nthreads, sizeof *workers);
  if (!workers) stress_fail(TEST ": no memory for %ld threads", nthreads);
  for (long i = 0; i < nthreads; i++) {
    /* A stack of its own, never touched before: glibc would hand a joined thread's on. */
    void *stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    pthread_attr_t attr;
    if (stack == MAP_FAILED || pthread_attr_init(&attr) ||
        pthread_attr_setstack(&attr, stack, STACK_BYTES))
      stress_fail(TEST ": no stack for thread %ld", i);
    workers[i].index = (uint32_t)i;
    for (int k = 0; k < 2; k++)
      stress_block_new(&workers[i].given[k], magpie_malloc((size_t)large_size), (size_t)large_size,
                       seed + (uint64_t)k, "malloc", 0, 0, TEST);
    int rc = pthread_create(&workers[i].thread, &attr, worker, &workers[i]);
    if (rc) stress_fail(TEST ": pthread_create failed: error %d", rc);
    stress_thread_join(workers[i].thread, TEST);
    pthread_attr_destroy(&attr);
    munmap(stack, STACK_BYTES);
  }
  for (long i = 0; i < nthreads; i++)
    for (int k = 0; k < KEPT; k++)
      stress_block_free(&workers[i].kept[k], TEST);
  free(workers);
  stress_log("%s: %ld threads, each entering magpie %ld bytes deeper than the last of its kind: "
             "ok\n",
             TEST, nthreads, step);
  return 0;
}
