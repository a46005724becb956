/*
 * stress_handoff: many threads on few CPUs, handing blocks to their neighbours through
 * mailboxes while the magazines are taken from under them.
 *
 * Each of `threads` workers (64 by default: far more than the CPUs, so most run on per-CPU
 * magazines) allocates small blocks of mixed sizes, keeps a window of them, frees some itself
 * and drops `handoff_pct` percent into the mailbox of the next worker, which checks and frees
 * them: frees of blocks allocated elsewhere, on whatever CPU the thread is on now. A trimmer
 * thread calls magpie_trim every `trim_ms` (every CPU's magazines go back to the depots and
 * the CPUs' slots to the sentinel, so slow paths find half-empty pairs) and magpie_verify,
 * which checks the magazine layer's invariants (no magazine in two places, a sentinel loaded
 * only with a sentinel beside it, counts within capacity) besides the slabs and arenas.
 *
 * In the test build libmagpie_inject.so with MAGPIE_OPTIONS=inject=SEED, threads are moved to
 * other CPUs and delayed at the named points of the per-CPU, reaper and depot protocols
 * (src/platform/inject.h), which makes the races of a many-core machine happen on two CPUs.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TEST "stress_handoff"
#define MAILBOX 32 /* slots per worker's mailbox */

static long nthreads, nops, window, handoff_pct, trim_ms;
static stress_param_t params[] = {
    {"threads", 64, "worker threads", &nthreads},
    {"ops", 20000, "operations per worker", &nops},
    {"window", 32, "blocks each worker keeps", &window},
    {"handoff_pct", 30, "percent of frees handed to the next worker instead", &handoff_pct},
    {"trim_ms", 5, "interval of magpie_trim and magpie_verify", &trim_ms},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

typedef struct {
  _Atomic(stress_block_t *) slot[MAILBOX];
} mailbox_t;

typedef struct {
  pthread_t thread;
  uint32_t index;
} worker_t;

static uint64_t seed;
static mailbox_t *mailboxes;
static atomic_int workers_left;
static atomic_ullong handed, received;

/* Frees whatever the worker's mailbox holds. */
static void empty_mailbox(uint32_t self) {
  for (int i = 0; i < MAILBOX; i++) {
    stress_block_t *b = atomic_exchange(&mailboxes[self].slot[i], NULL);
    if (!b) continue;
    stress_block_check(b, TEST, "after handoff");
    stress_block_free(b, TEST);
    free(b);
    atomic_fetch_add(&received, 1);
  }
}

/* Puts b into a slot of worker to's mailbox; frees b here if every slot is taken. */
static void hand_to(uint32_t to, stress_block_t *b, stress_rng_t *rng) {
  stress_block_t *h = malloc(sizeof *h); /* the descriptor travels in a block of its own */
  if (!h) stress_fail(TEST ": out of memory for a descriptor");
  *h = *b;
  memset(b, 0, sizeof *b);
  for (int tries = 0; tries < 4; tries++) {
    stress_block_t *none = NULL;
    if (atomic_compare_exchange_strong(
            &mailboxes[to].slot[stress_rng_below(rng, MAILBOX)], &none, h)) {
      atomic_fetch_add(&handed, 1);
      return;
    }
  }
  stress_block_free(h, TEST);
  free(h);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, w->index);
  stress_block_t *mine = calloc((size_t)window, sizeof *mine);
  if (!mine) stress_fail(TEST ": out of memory for a window");
  uint32_t next = (w->index + 1) % (uint32_t)nthreads;
  for (long op = 0; op < nops; op++) {
    stress_block_t *b = &mine[stress_rng_below(&rng, (uint64_t)window)];
    if (!b->p) {
      size_t size = (size_t)stress_rng_range(&rng, 8, 1000);
      stress_block_new(b, magpie_malloc(size), size, stress_rng_next(&rng), "malloc", w->index,
                       0, TEST);
    } else if (stress_rng_pct(&rng, (unsigned)handoff_pct)) {
      stress_block_check(b, TEST, "before handoff");
      hand_to(next, b, &rng);
    } else {
      stress_block_free(b, TEST);
    }
    if ((op & 63) == 0) empty_mailbox(w->index);
  }
  for (long i = 0; i < window; i++)
    if (mine[i].p) stress_block_free(&mine[i], TEST);
  free(mine);
  atomic_fetch_sub(&workers_left, 1);
  return NULL;
}

static void *trimmer(void *arg) {
  (void)arg;
  struct timespec pause = {0, trim_ms * 1000000L};
  while (atomic_load(&workers_left) > 0) {
    magpie_trim();
    if (magpie_verify() != 0) stress_fail(TEST ": magpie_verify found a broken heap");
    nanosleep(&pause, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nthreads < 2 || window < 1) stress_fail(TEST ": threads >= 2 and window >= 1, please");
  mailboxes = calloc((size_t)nthreads, sizeof *mailboxes);
  worker_t *workers = calloc((size_t)nthreads, sizeof *workers);
  if (!mailboxes || !workers) stress_fail(TEST ": out of memory");
  atomic_store(&workers_left, (int)nthreads);
  pthread_t trim;
  stress_thread_start(&trim, trimmer, NULL, TEST);
  for (long i = 0; i < nthreads; i++) {
    workers[i].index = (uint32_t)i;
    stress_thread_start(&workers[i].thread, worker, &workers[i], TEST);
  }
  for (long i = 0; i < nthreads; i++)
    stress_thread_join(workers[i].thread, TEST);
  stress_thread_join(trim, TEST);
  for (long i = 0; i < nthreads; i++)
    empty_mailbox((uint32_t)i);
  if (atomic_load(&handed) != atomic_load(&received))
    stress_fail(TEST ": %llu blocks handed over, %llu received", atomic_load(&handed),
                atomic_load(&received));
  if (magpie_verify() != 0) stress_fail(TEST ": magpie_verify found a broken heap at the end");
  stress_log(TEST ": %ld workers, %llu blocks handed over: ok", nthreads, atomic_load(&handed));
  free(workers);
  free(mailboxes);
  return 0;
}
