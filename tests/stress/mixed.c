/*
 * stress_mixed: every entry point, at random, with blocks changing owners.
 *
 * Each thread keeps a window of descriptors (stress_block_t). Per operation it picks one: an
 * empty one gets a block from malloc, calloc (checked zero), realloc(NULL), posix_memalign or
 * aligned_alloc (checked aligned), or malloc(0); a full one is freed, reallocated (the preserved
 * prefix checked), checked in place, or traded: an atomic exchange puts the descriptor into one
 * of the shared slots and takes out whatever descriptor was there. A block is checked before it
 * is handed over and after it is received, then refilled by its new owner.
 *
 * `audits` times during the run all threads stop at a barrier; one checks every live block's
 * pattern, that no two live blocks overlap, and that every descriptor is in exactly one window
 * or slot.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST "stress_mixed"

enum { OP_MALLOC, OP_CALLOC, OP_REALLOC_NULL, OP_MEMALIGN, OP_ALIGNED, OP_MALLOC0, OP_FREE,
       OP_REALLOC, OP_TRADE, OP_CHECK, OP_COUNT };
static const char *const op_names[OP_COUNT] = {
    "malloc", "calloc", "realloc(NULL)", "posix_memalign", "aligned_alloc", "malloc(0)",
    "free",   "realloc", "trade",        "check"};

static long nthreads, nops, window, nslots, naudits;
static stress_param_t params[] = {
    {"threads", 16, "threads", &nthreads},
    {"ops", 120000, "operations per thread", &nops},
    {"window", 64, "descriptors per thread", &window},
    {"slots", 64, "shared slots for trading blocks", &nslots},
    {"audits", 8, "stop-the-world checks during the run", &naudits},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

static uint64_t seed;
static stress_block_t *pool;             /* every descriptor: nthreads * window + nslots */
static stress_block_t **windows;         /* windows[t * window + i]: owned by thread t */
static _Atomic(stress_block_t *) *slots; /* nslots shared descriptors, traded by exchange */
static pthread_barrier_t barrier;
static atomic_ullong op_counts[OP_COUNT];

typedef struct {
  pthread_t thread;
  uint32_t index;
} worker_t;

static size_t pick_size(stress_rng_t *rng) {
  if (stress_rng_pct(rng, 1))
    return (size_t)stress_rng_range(rng, 64 * 1024, 512 * 1024);
  return stress_size_skewed(rng, 1, 64 * 1024);
}

static void check_zero(const unsigned char *p, size_t n, const char *what) {
  for (size_t k = 0; k < n; k++)
    if (p[k])
      stress_fail(TEST ": %s of %zu bytes = %p: byte %zu is %#x, not zero", what, n,
                  (const void *)p, k, p[k]);
}

/* Fills an empty descriptor; returns the operation used. */
static int allocate(stress_block_t *d, stress_rng_t *rng, uint32_t tid) {
  unsigned r = (unsigned)stress_rng_below(rng, 100);
  size_t size = pick_size(rng);
  uint64_t s = stress_rng_next(rng);
  if (r < 45) {
    stress_block_new(d, magpie_malloc(size), size, s, "malloc", tid, 0, TEST);
    return OP_MALLOC;
  }
  if (r < 65) {
    size_t nmemb = (size_t)stress_rng_range(rng, 1, 16), each = size / nmemb + 1;
    void *p = magpie_calloc(nmemb, each);
    if (p)
      check_zero(p, nmemb * each, "calloc");
    stress_block_new(d, p, nmemb * each, s, "calloc", tid, 0, TEST);
    return OP_CALLOC;
  }
  if (r < 72) {
    stress_block_new(d, magpie_realloc(NULL, size), size, s, "realloc(NULL)", tid, 0, TEST);
    return OP_REALLOC_NULL;
  }
  if (r < 87) {
    size_t align = (size_t)1 << (stress_rng_pct(rng, 5) ? stress_rng_range(rng, 13, 16)
                                                        : stress_rng_range(rng, 3, 12));
    void *p = NULL;
    int rc = magpie_posix_memalign(&p, align, size);
    if (rc)
      stress_fail(TEST ": thread %u: posix_memalign(%zu, %zu) returned %d", (unsigned)tid, align,
                  size, rc);
    stress_block_new(d, p, size, s, "posix_memalign", tid, (uint32_t)align, TEST);
    return OP_MEMALIGN;
  }
  if (r < 97) {
    size_t align = (size_t)1 << stress_rng_range(rng, 0, 8);
    size = (size + align - 1) & ~(align - 1); /* C11: a multiple of the alignment */
    stress_block_new(d, magpie_aligned_alloc(align, size), size, s, "aligned_alloc", tid,
                     (uint32_t)align, TEST);
    return OP_ALIGNED;
  }
  /* malloc(0) returns NULL or a unique pointer that free accepts. */
  void *p = magpie_malloc(0);
  if (p)
    stress_block_new(d, p, 0, s, "malloc(0)", tid, 0, TEST);
  return OP_MALLOC0;
}

/* Stop the world: every live block intact, none overlapping, every descriptor in one place. */
static void audit(int nr) {
  size_t n = (size_t)(nthreads * window + nslots);
  unsigned char *seen = calloc(n, 1);
  if (!seen)
    stress_fail(TEST ": out of memory for the audit");
  size_t nwin = (size_t)(nthreads * window);
  for (size_t i = 0; i < n; i++) {
    stress_block_t *d = i < nwin ? windows[i] : atomic_load(&slots[i - nwin]);
    size_t at = (size_t)(d - pool);
    if (at >= n || seen[at]++)
      stress_fail(TEST ": harness bug: descriptor %p at place %zu is %s", (void *)d, i,
                  at >= n ? "not in the pool" : "in two places");
  }
  free(seen);
  /* Overlap first: two owners of one block also break its pattern, but this names both. */
  stress_check_overlap(pool, n, TEST, "stop-the-world audit");
  size_t live = 0;
  for (size_t i = 0; i < n; i++) {
    stress_block_check(&pool[i], TEST, "in a stop-the-world audit");
    live += pool[i].p != NULL;
  }
  stress_log(TEST ": audit %d: %zu live blocks intact, none overlapping", nr, live);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  uint32_t tid = w->index;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, tid);
  stress_block_t **win = &windows[(size_t)tid * (size_t)window];
  unsigned long long counts[OP_COUNT] = {0};
  long per_audit = naudits > 0 ? nops / (naudits + 1) : 0;
  int audits_done = 0;
  for (long op = 0; op < nops; op++) {
    if (per_audit > 0 && op > 0 && op % per_audit == 0 && audits_done < naudits) {
      pthread_barrier_wait(&barrier);
      if (tid == 0)
        audit(audits_done + 1);
      pthread_barrier_wait(&barrier);
      audits_done++;
    }
    size_t i = (size_t)stress_rng_below(&rng, (uint64_t)window);
    stress_block_t *d = win[i];
    unsigned r = (unsigned)stress_rng_below(&rng, 100);
    if (!d->p && r < 80) {
      counts[allocate(d, &rng, tid)]++;
    } else if (d->p && r < 30) {
      stress_block_free(d, TEST);
      counts[OP_FREE]++;
    } else if (d->p && r < 50) {
      stress_block_realloc(d, pick_size(&rng), stress_rng_next(&rng), tid, TEST);
      counts[OP_REALLOC]++;
    } else if (!d->p || r < 85) {
      /* Trade, empty descriptors too: the slot takes ours, we take what it held. */
      stress_block_check(d, TEST, "before handing over to a slot");
      stress_block_t *got = atomic_exchange(&slots[stress_rng_below(&rng, (uint64_t)nslots)], d);
      win[i] = got;
      if (got->p) {
        stress_block_check(got, TEST, "after taking over from a slot");
        stress_block_rekey(got, stress_rng_next(&rng), tid);
      }
      counts[OP_TRADE]++;
    } else {
      stress_block_check(d, TEST, "in place");
      if (magpie_usable_size(d->p) < d->size)
        stress_fail(TEST ": usable size of %p fell to %zu below its size %zu", d->p,
                    magpie_usable_size(d->p), d->size);
      counts[OP_CHECK]++;
    }
  }
  /* Threads that finish early still meet the others at the barriers they skipped. */
  for (; audits_done < naudits && per_audit > 0; audits_done++) {
    pthread_barrier_wait(&barrier);
    if (tid == 0)
      audit(audits_done + 1);
    pthread_barrier_wait(&barrier);
  }
  for (long k = 0; k < window; k++)
    stress_block_free(win[k], TEST);
  for (int k = 0; k < OP_COUNT; k++)
    atomic_fetch_add(&op_counts[k], counts[k]);
  return NULL;
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nthreads < 1 || nops < 0 || window < 1 || nslots < 1 || naudits < 0)
    stress_fail(TEST ": bad parameters");

  size_t n = (size_t)(nthreads * window + nslots);
  pool = calloc(n, sizeof *pool);
  windows = calloc((size_t)(nthreads * window), sizeof *windows);
  slots = calloc((size_t)nslots, sizeof *slots);
  worker_t *w = calloc((size_t)nthreads, sizeof *w);
  if (!pool || !windows || !slots || !w)
    stress_fail(TEST ": out of memory for the descriptors");
  for (size_t i = 0; i < (size_t)(nthreads * window); i++)
    windows[i] = &pool[i];
  for (long k = 0; k < nslots; k++)
    atomic_init(&slots[k], &pool[nthreads * window + k]);
  if (pthread_barrier_init(&barrier, NULL, (unsigned)nthreads))
    stress_fail(TEST ": pthread_barrier_init failed");

  double t0 = stress_now();
  for (long t = 0; t < nthreads; t++) {
    w[t].index = (uint32_t)t;
    stress_thread_start(&w[t].thread, worker, &w[t], TEST);
  }
  for (long t = 0; t < nthreads; t++)
    stress_thread_join(w[t].thread, TEST);
  /* What the slots still hold is freed here, by a thread that allocated none of it. */
  for (long k = 0; k < nslots; k++)
    stress_block_free(atomic_load(&slots[k]), TEST);
  for (size_t i = 0; i < n; i++)
    if (pool[i].p)
      stress_fail(TEST ": harness bug: block %p still live at the end", pool[i].p);

  char line[512];
  size_t len = 0;
  for (int k = 0; k < OP_COUNT && len < sizeof line; k++)
    len += (size_t)snprintf(line + len, sizeof line - len, " %s=%llu", op_names[k],
                            (unsigned long long)atomic_load(&op_counts[k]));
  stress_log(TEST ":%s", line);
  pthread_barrier_destroy(&barrier);
  free(w);
  free(slots);
  free(windows);
  free(pool);
  stress_log(TEST ": ok (%.2f s)", stress_now() - t0);
  return 0;
}
