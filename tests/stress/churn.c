/*
 * stress_churn: many short-lived threads.
 *
 * Threads are started in waves (wave threads at a time, joined before the next wave). Each does a
 * few hundred random malloc/realloc/free operations of mixed sizes over a small window of live
 * blocks, frees halfway through the blocks a thread of the previous wave left it, and exits
 * leaving up to HANDOFF of its own blocks for a thread of the next wave (or, every
 * MAIN_FREES_EVERY waves, for the main thread) to check and free.
 *
 * Whatever a thread caches must go back when it exits: the resident set is recorded once
 * `baseline` threads have run (the process has reached its working size by then) and must end
 * less than rss_slack_mib above it. An allocator that strands a dead thread's magazines grows by
 * that much per thread, which 100,000 threads turn into gigabytes.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TEST "stress_churn"
/* Live blocks per thread. */
#define WINDOW 16
/* Blocks a thread leaves behind for a thread of the next wave. */
#define HANDOFF 4
/* Every this many waves the main thread frees the leftovers instead of the next wave. */
#define MAIN_FREES_EVERY 16
/* Progress lines (RSS) printed over the run. */
#define REPORTS 10

static long nthreads, wave, ops, baseline, slack_mib;
static stress_param_t params[] = {
    {"threads", 100000, "threads in all", &nthreads},
    {"wave", 64, "threads alive at a time", &wave},
    {"ops", 200, "operations per thread", &ops},
    {"baseline", 5000, "threads run before the resident set is recorded", &baseline},
    {"rss_slack_mib", 64, "allowed growth of the resident set after the baseline, MiB", &slack_mib},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

typedef struct {
  pthread_t thread;
  uint64_t serial;                /* thread number over the whole run */
  long ops;                       /* operations to do */
  stress_block_t in[HANDOFF];     /* left by a thread of the previous wave; freed here */
  stress_block_t out[HANDOFF];    /* left for the next wave */
} churner_t;

static uint64_t seed;

static void *churner(void *arg) {
  churner_t *c = arg;
  uint32_t tid = (uint32_t)c->serial;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, c->serial);
  stress_block_t live[WINDOW];
  memset(live, 0, sizeof live);
  for (long op = 0; op < c->ops; op++) {
    if (op == c->ops / 2)
      for (int k = 0; k < HANDOFF; k++)
        stress_block_free(&c->in[k], TEST);
    stress_block_t *b = &live[stress_rng_below(&rng, WINDOW)];
    size_t size = stress_rng_pct(&rng, 1) ? (size_t)stress_rng_range(&rng, 8193, 64 * 1024)
                                          : stress_size_skewed(&rng, 1, 8192);
    if (!b->p)
      stress_block_new(b, magpie_malloc(size), size, stress_rng_next(&rng), "malloc", tid, 0,
                       TEST);
    else if (stress_rng_pct(&rng, 20))
      stress_block_realloc(b, size, stress_rng_next(&rng), tid, TEST);
    else
      stress_block_free(b, TEST);
  }
  for (int k = 0; k < HANDOFF; k++)
    stress_block_free(&c->in[k], TEST); /* when ops < 2 */
  int left = 0;
  for (int k = 0; k < WINDOW; k++) {
    if (live[k].p && left < HANDOFF)
      c->out[left++] = live[k];
    else
      stress_block_free(&live[k], TEST);
  }
  return NULL;
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nthreads < 1 || wave < 1 || ops < 0 || baseline < 0 || baseline >= nthreads ||
      slack_mib < 0)
    stress_fail(TEST ": bad parameters");
  size_t slack = (size_t)slack_mib << 20;

  /* Two generations of records: the running wave reads the leftovers of the one before. */
  churner_t *gen[2];
  for (int g = 0; g < 2; g++) {
    gen[g] = calloc((size_t)wave, sizeof(churner_t));
    if (!gen[g])
      stress_fail(TEST ": out of memory for thread records");
  }
  double t0 = stress_now();
  size_t rss_start = stress_rss_bytes(), rss_base = 0, rss_max = 0;
  long started = 0, waves = 0, next_report = nthreads / REPORTS;
  int have_base = 0;
  while (started < nthreads) {
    churner_t *cur = gen[waves & 1], *prev = gen[(waves + 1) & 1];
    long n = nthreads - started < wave ? nthreads - started : wave;
    for (long i = 0; i < n; i++) {
      churner_t *c = &cur[i];
      memset(c, 0, sizeof *c);
      c->serial = (uint64_t)(started + i);
      c->ops = ops;
      /* Inherit the leftovers of the previous wave's thread (i + 1) mod wave. */
      memcpy(c->in, prev[(i + 1) % wave].out, sizeof c->in);
      memset(prev[(i + 1) % wave].out, 0, sizeof c->in);
    }
    /* Leftovers of the previous wave that no thread of this one inherits (a short last wave). */
    for (long i = 0; i < wave; i++)
      for (int k = 0; k < HANDOFF; k++)
        stress_block_free(&prev[i].out[k], TEST);
    for (long i = 0; i < n; i++)
      stress_thread_start(&cur[i].thread, churner, &cur[i], TEST);
    for (long i = 0; i < n; i++)
      stress_thread_join(cur[i].thread, TEST);
    if (waves % MAIN_FREES_EVERY == MAIN_FREES_EVERY - 1)
      for (long i = 0; i < n; i++)
        for (int k = 0; k < HANDOFF; k++)
          stress_block_free(&cur[i].out[k], TEST);
    started += n;
    waves++;
    if (!have_base && started >= baseline) {
      rss_base = stress_rss_bytes();
      have_base = 1;
      stress_log(TEST ": %ld threads: resident %.1f MiB (baseline; %.1f MiB at start)", started,
                 (double)rss_base / 1048576.0, (double)rss_start / 1048576.0);
    }
    if (started >= next_report || started == nthreads) {
      size_t rss = stress_rss_bytes();
      if (rss > rss_max)
        rss_max = rss;
      stress_log(TEST ": %ld threads: resident %.1f MiB, magpie mapped %.1f MiB (%.1f s)", started,
                 (double)rss / 1048576.0, (double)stress_mapped_bytes(TEST) / 1048576.0,
                 stress_now() - t0);
      next_report += nthreads / REPORTS > 0 ? nthreads / REPORTS : 1;
    }
  }
  for (int g = 0; g < 2; g++)
    for (long i = 0; i < wave; i++)
      for (int k = 0; k < HANDOFF; k++)
        stress_block_free(&gen[g][i].out[k], TEST);
  size_t rss_end = stress_rss_bytes();
  if (rss_end > rss_max)
    rss_max = rss_end;
  stress_log(TEST ": %ld threads in %ld waves: resident at baseline %.1f MiB, at end %.1f MiB, "
             "highest seen %.1f MiB",
             started, waves, (double)rss_base / 1048576.0, (double)rss_end / 1048576.0,
             (double)rss_max / 1048576.0);
  if (rss_end > rss_base + slack)
    stress_fail(TEST ": resident set grew from %zu bytes after %ld threads to %zu bytes after "
                "%ld threads, more than the allowed %zu: memory of exited threads is stranded",
                rss_base, baseline, rss_end, started, slack);
  free(gen[0]);
  free(gen[1]);
  stress_log(TEST ": ok (%.2f s)", stress_now() - t0);
  return 0;
}
