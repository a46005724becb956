/*
 * stress_remap: large blocks that move while other threads map new slabs.
 *
 * A realloc that grows a large block beyond its mapping may move it (mremap): its old range
 * goes back to the kernel at once, and the next mapping any thread makes may land there - a
 * slab arena's huge page with a slab at its start, whose page-map entries must then not be
 * touched by the move that freed the range. Growers grow blocks from 1 MiB by doubling up to
 * `top` MiB, checking each move kept the contents; slab threads allocate `objects` small
 * blocks of 16..4096 bytes, check and free them all and trim (magpie_trim unmaps the spans
 * left wholly free), again and again, so that new slabs keep landing on fresh mappings. A
 * page-map entry lost or overwritten shows as a free that magpie refuses ("invalid free"), or
 * a block whose pattern changed. The race it looks for needs the mover to stall between its
 * move and its page-map update: rare on an idle machine, so the threads outnumber the cores.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <stdlib.h>

#define TEST "stress_remap"

static long ngrowers, nslabbers, nrounds, top_mib, nobjects;
static stress_param_t params[] = {
    {"growers", 4, "threads growing large blocks by realloc", &ngrowers},
    {"slabbers", 8, "threads allocating and freeing small blocks", &nslabbers},
    {"rounds", 20, "rounds of each thread", &nrounds},
    {"top", 16, "MiB a grown block reaches", &top_mib},
    {"objects", 10000, "small blocks a slab thread holds at its peak", &nobjects},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

static uint64_t seed;

static void *grower(void *arg) {
  uint32_t tid = (uint32_t)(uintptr_t)arg;
  stress_block_t b = {0};
  for (long r = 0; r < nrounds; r++) {
    stress_block_new(&b, magpie_malloc((size_t)1 << 20), (size_t)1 << 20, seed + r, "malloc", tid,
                     0, TEST);
    for (size_t size = (size_t)2 << 20; size <= (size_t)top_mib << 20; size *= 2)
      stress_block_realloc(&b, size, seed + r, tid, TEST);
    stress_block_free(&b, TEST);
  }
  return NULL;
}

static void *slabber(void *arg) {
  uint32_t tid = (uint32_t)(uintptr_t)arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, tid);
  stress_block_t *blocks = calloc((size_t)nobjects, sizeof *blocks);
  if (!blocks) stress_fail("%s: no memory for the descriptors", TEST);
  for (long r = 0; r < nrounds; r++) {
    for (long i = 0; i < nobjects; i++) {
      size_t size = stress_size_skewed(&rng, 16, 4096);
      stress_block_new(&blocks[i], magpie_malloc(size), size, seed + r, "malloc", tid, 0, TEST);
    }
    for (long i = 0; i < nobjects; i++)
      stress_block_free(&blocks[i], TEST);
    magpie_trim();
  }
  free(blocks);
  return NULL;
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  stress_watchdog((unsigned)stress_param(params, NPARAMS, "timeout"), TEST);
  long n = ngrowers + nslabbers;
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  if (!threads) stress_fail("%s: no memory for the threads", TEST);
  for (long t = 0; t < n; t++)
    stress_thread_start(&threads[t], t < ngrowers ? grower : slabber, (void *)(uintptr_t)t, TEST);
  for (long t = 0; t < n; t++)
    stress_thread_join(threads[t], TEST);
  free(threads);
  stress_log("%s: %ld growers and %ld slab threads, %ld rounds each: ok\n", TEST, ngrowers,
             nslabbers, nrounds);
  return 0;
}
