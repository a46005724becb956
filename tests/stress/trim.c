/*
 * stress_trim: magpie_trim against the reaper. A trim takes every CPU's and thread's magazines
 * and the depots back to the slabs, so right after it no block of malloc's classes is cached
 * while no other thread allocates. The reaper reaps meanwhile (run with reap_ms=1, retain=0):
 * the magazines a reap has taken are on their way to a depot or the slabs outside every
 * lock, and a trim that met such a reap halfway missed them (src/front/caches.c theory 3).
 *
 * Each round, `threads` threads allocate `blocks` blocks each, of sizes across most small
 * classes, and as many others free them (frees from other threads, on whichever CPU they run:
 * the CPUs' magazines fill), all joined; the main thread waits 0-3 ms, so that the reaper's
 * reaps fall anywhere in what follows, trims, and checks that no class caches a block.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define TEST "stress_trim"

static long nthreads, nblocks, nrounds, max_size;
static uint64_t round_seed; /* this round's, set before its threads start */
static stress_param_t params[] = {
    {"threads", 4, "threads that allocate, and as many that free", &nthreads},
    {"blocks", 500, "blocks each allocating thread makes a round", &nblocks},
    {"rounds", 300, "rounds, each ending in a trim and the check", &nrounds},
    {"max_size", 49152, "largest block, bytes", &max_size},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

typedef struct {
  pthread_t thread;
  uint32_t index;
  stress_block_t *blocks; /* nblocks, made by this thread, freed by the next one */
  stress_block_t *theirs; /* the blocks this thread frees */
} worker_t;

static void *allocate(void *arg) {
  worker_t *w = arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, round_seed, w->index);
  for (long i = 0; i < nblocks; i++) {
    size_t size = (size_t)stress_rng_range(&rng, 16, (uint64_t)max_size);
    stress_block_new(&w->blocks[i], magpie_malloc(size), size, round_seed + (uint64_t)i, "malloc",
                     w->index, 0, TEST);
  }
  return NULL;
}

static void *release(void *arg) {
  worker_t *w = arg;
  for (long i = 0; i < nblocks; i++)
    stress_block_free(&w->theirs[i], TEST);
  return NULL;
}

static void run_all(worker_t *workers, void *(*fn)(void *)) {
  for (long i = 0; i < nthreads; i++)
    stress_thread_start(&workers[i].thread, fn, &workers[i], TEST);
  for (long i = 0; i < nthreads; i++)
    stress_thread_join(workers[i].thread, TEST);
}

/* Fails where a class still caches blocks right after the trim. */
static void check_trimmed(long round) {
  size_t cached = stress_cached_bytes(TEST, "right after magpie_trim");
  if (cached)
    stress_fail(TEST ": round %ld: %zu bytes still cached right after magpie_trim: the trim "
                     "missed what a reap held",
                round, cached);
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  uint64_t seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nthreads < 1 || nblocks < 1 || max_size < 16)
    stress_fail(TEST ": threads and blocks must be positive, max_size at least 16");
  worker_t *workers = calloc((size_t)nthreads, sizeof *workers);
  stress_block_t *blocks = calloc((size_t)(nthreads * nblocks), sizeof *blocks);
  if (!workers || !blocks) stress_fail(TEST ": no memory for %ld threads", nthreads);
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, (uint64_t)nthreads);
  for (long i = 0; i < nthreads; i++) {
    workers[i].index = (uint32_t)i;
    workers[i].blocks = blocks + i * nblocks;
  }
  for (long i = 0; i < nthreads; i++)
    workers[i].theirs = workers[(i + 1) % nthreads].blocks;
  for (long round = 1; round <= nrounds; round++) {
    round_seed = seed + (uint64_t)round;
    run_all(workers, allocate);
    run_all(workers, release);
    struct timespec wait = {0, (long)stress_rng_below(&rng, 3000000)};
    nanosleep(&wait, NULL);
    magpie_trim();
    check_trimmed(round);
  }
  free(workers);
  free(blocks);
  stress_log("%s: %ld rounds, nothing cached after each trim: ok\n", TEST, nrounds);
  return 0;
}
