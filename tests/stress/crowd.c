/*
 * stress_crowd: hundreds of threads that start at once and each allocate a small working set,
 * as a thread-per-connection server's do at start-up.
 *
 * Threads that miss together on a class with no partial slab, or on an empty metadata pool,
 * each make a slab or map a chunk while the lock is let go (src/core/slab.c theory 5,
 * src/core/meta.c theory 4). Only what the crowd needs may stay: the bytes magpie maps while
 * the crowd holds its blocks must stay within a small multiple of the bytes it holds and the
 * homes' slabs (one a CPU or early thread and class: slab.c theory 8; plus, where
 * threads keep magazines of their own - percpu=0, or no rseq - a budget a thread for them; the
 * slabs' room within the multiple all the same), and after the crowd's allocations each class
 * may have one partly used slab a home (a CPU, or one of the first threads: slab.c theory 8)
 * and one shared, not one a thread (docs/decisions/crowd-made-once.md). Run with
 * hugepages=never: huge pages map in 2 MiB steps.
 *
 * In the test build libmagpie_inject.so with MAGPIE_OPTIONS=inject=SEED the unlocked window is
 * held open at those points (INJECT_UNLOCKED, src/platform/inject.h), so that crowds form there
 * on every run, not by chance.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TEST "stress_crowd"

static long nthreads, nblocks, max_size, slack_kib, own_kib;
static stress_param_t params[] = {
    {"threads", 512, "threads started at once", &nthreads},
    {"blocks", 64, "blocks each thread allocates and holds", &nblocks},
    {"max_size", 1024, "largest block, bytes (from 16, skewed small)", &max_size},
    {"slack_kib", 4096, "mapped KiB allowed beyond twice the bytes held", &slack_kib},
    {"own_kib", 24, "... and a thread's, where threads keep magazines of their own", &own_kib},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

typedef struct {
  pthread_t thread;
  uint32_t index;
  stress_block_t *blocks; /* nblocks descriptors, allocated by the main thread */
  size_t held;            /* bytes requested, written before the second barrier */
} worker_t;

static uint64_t seed;
static pthread_barrier_t start, holding, done;

static void *worker(void *arg) {
  worker_t *w = arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, w->index);
  stress_block_t *blocks = w->blocks;
  pthread_barrier_wait(&start); /* each thread's first call to magpie comes after it */
  for (long i = 0; i < nblocks; i++) {
    size_t size = stress_size_skewed(&rng, 16, (size_t)max_size);
    stress_block_new(&blocks[i], magpie_malloc(size), size, seed + (uint64_t)i, "malloc", w->index,
                     0, TEST);
    w->held += size;
  }
  pthread_barrier_wait(&holding); /* the main thread measures */
  pthread_barrier_wait(&done);
  for (long i = 0; i < nblocks; i++)
    stress_block_free(&blocks[i], TEST);
  return NULL;
}

/* The slabs' room, in bytes of objects, and their number, from the JSON statistics (where the
   mapping bound fails, whether what was mapped beyond it lies in slabs or elsewhere: arena
   space, metadata), the room of those that homes own (one a home and class, slab.c theory 8),
   and whether threads beyond the first ones use the CPUs' magazines. */
static void slab_totals(size_t *bytes, size_t *count, size_t *homes, size_t *percpu) {
  size_t len, cls, size, slabs, owned, objects;
  const char *json = stress_stats_json(TEST, &len), *end = json + len, *top = json;
  static const char classes[] = "\"classes\"";
  const char *at = memmem(json, len, classes, sizeof classes - 1);
  if (!stress_json_next(&top, end, "\"percpu\"", percpu))
    stress_fail(TEST ": the JSON statistics have no \"percpu\"");
  *bytes = *count = *homes = 0;
  while (at && stress_json_next(&at, end, "\"class\"", &cls) &&
         stress_json_next(&at, end, "\"size\"", &size) &&
         stress_json_next(&at, end, "\"slabs\"", &slabs) &&
         stress_json_next(&at, end, "\"slabs_owned\"", &owned) &&
         stress_json_next(&at, end, "\"slab_objects\"", &objects)) {
    *bytes += objects * size;
    *count += slabs;
    *homes += slabs ? owned * (objects / slabs) * size : 0;
  }
  stress_stats_release(json, len);
}

/* The crowd has only allocated: in each class at most one slab a home and one shared may be
   partly used, those being carved, so its slabs' free room is less than that many slabs'
   objects. Threads that each listed a slab of their own would leave hundreds partly used. */
static void check_partial_slabs(void) {
  size_t len, cls, slabs, owned, objects, out;
  const char *json = stress_stats_json(TEST, &len), *end = json + len;
  static const char classes[] = "\"classes\"";
  const char *at = memmem(json, len, classes, sizeof classes - 1);
  if (!at) stress_fail(TEST ": the JSON statistics have no \"classes\"");
  unsigned checked = 0;
  while (stress_json_next(&at, end, "\"class\"", &cls) &&
         stress_json_next(&at, end, "\"slabs\"", &slabs) &&
         stress_json_next(&at, end, "\"slabs_owned\"", &owned) &&
         stress_json_next(&at, end, "\"slab_objects\"", &objects) &&
         stress_json_next(&at, end, "\"slab_objects_out\"", &out)) {
    if (!slabs) continue;
    checked++;
    if (objects - out >= (owned + 1) * (objects / slabs))
      stress_fail(TEST ": class %zu has %zu slabs of %zu objects, %zu of them homes', with %zu "
                       "free among them: more than one partly used slab a home and one shared "
                       "after allocations only",
                  cls, slabs, objects / slabs, owned, objects - out);
  }
  if (!checked) stress_fail(TEST ": no class with slabs in the JSON statistics");
  stress_log("%s: %u classes, at most one partly used slab a home and one shared each\n", TEST,
             checked);
  stress_stats_release(json, len);
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  worker_t *workers = calloc((size_t)nthreads, sizeof *workers);
  stress_block_t *blocks = calloc((size_t)(nthreads * nblocks), sizeof *blocks);
  if (!workers || !blocks || pthread_barrier_init(&start, NULL, (unsigned)nthreads) != 0 ||
      pthread_barrier_init(&holding, NULL, (unsigned)nthreads + 1) != 0 ||
      pthread_barrier_init(&done, NULL, (unsigned)nthreads + 1) != 0)
    stress_fail(TEST ": no memory for %ld threads", nthreads);
  magpie_free(magpie_malloc(16)); /* magpie set up before the baseline */
  size_t before = stress_mapped_bytes(TEST), rss_before = stress_rss_bytes();
  for (long i = 0; i < nthreads; i++) {
    workers[i].index = (uint32_t)i;
    workers[i].blocks = blocks + i * nblocks;
    stress_thread_start(&workers[i].thread, worker, &workers[i], TEST);
  }
  pthread_barrier_wait(&holding);
  size_t after = stress_mapped_bytes(TEST), held = 0, rss = stress_rss_bytes() - rss_before;
  for (long i = 0; i < nthreads; i++)
    held += workers[i].held;
  size_t slab_bytes, slabs, homes, percpu;
  slab_totals(&slab_bytes, &slabs, &homes, &percpu);
  size_t grew = after > before ? after - before : 0;
  size_t slabs_allowed = 2 * held + ((size_t)slack_kib << 10) + homes;
  size_t allowed = slabs_allowed + (percpu ? 0 : (size_t)nthreads * ((size_t)own_kib << 10));
  stress_log("%s: %ld threads hold %zu KiB; magpie mapped %zu KiB more for them (allowed %zu: "
             "%s), its %zu slabs have room for %zu KiB of objects (homes' slabs %zu KiB), the "
             "process's RSS grew %zu KiB\n",
             TEST, nthreads, held >> 10, grew >> 10, allowed >> 10,
             percpu ? "per-CPU magazines" : "magazines of each thread's own", slabs,
             slab_bytes >> 10, homes >> 10, rss >> 10);
  if (grew > allowed)
    stress_fail(TEST ": %ld threads starting at once hold %zu KiB, and magpie mapped %zu KiB "
                     "for them: more than twice the bytes held, the homes' slabs and %ld KiB%s",
                nthreads, held >> 10, grew >> 10, slack_kib,
                percpu ? "" : ", and the threads' own magazines' budget");
  if (slab_bytes > slabs_allowed)
    stress_fail(TEST ": %ld threads starting at once hold %zu KiB in slabs with room for %zu "
                     "KiB: more than twice the bytes held, the homes' slabs and %ld KiB",
                nthreads, held >> 10, slab_bytes >> 10, slack_kib);
  check_partial_slabs();
  pthread_barrier_wait(&done);
  for (long i = 0; i < nthreads; i++)
    stress_thread_join(workers[i].thread, TEST);
  free(workers);
  free(blocks);
  stress_log("%s: ok\n", TEST);
  return 0;
}
